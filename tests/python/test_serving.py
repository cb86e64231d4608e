"""`transformers serve --device rbln --continuous-batching` under concurrent load (docs/serving.md): every
completion is CPU's greedy `model.generate`, device memory comes back after the load, the server exits with 0."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import serving  # noqa: E402

MAX_TOKENS = 12
# The KV cache sized explicitly: transformers sizes it from host RAM on any device but cuda, xpu and mps.
CB_OPTIONS = ["--continuous-batching", "--cb-num-blocks", "64", "--cb-max-batch-tokens", "128"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("serving") / "tiny-llama")
    serving.build(path)
    return path


@pytest.fixture(scope="module")
def requests_and_expected(checkpoint):
    """16 requests, completions and chats alternating, 3 to 33 words; each with CPU's greedy text and length."""
    requests = [(prompt, i % 2 == 1) for i, prompt in enumerate(serving.prompts(16))]
    expected = serving.cpu_greedy(checkpoint, requests, MAX_TOKENS)
    return requests, expected


def test_serve_on_rbln_under_load_gives_cpu_tokens_frees_memory_and_exits_cleanly(
        checkpoint, requests_and_expected, tmp_path):
    requests, expected = requests_and_expected
    log = tmp_path / "server.log"
    with serving.Server(checkpoint, ["--device", "rbln", *CB_OPTIONS], str(log), timeout=30) as server:
        # The first request sets continuous batching up: its paged KV cache and static buffers.
        warm = server.load(requests[:1], MAX_TOKENS)["results"][0]
        idle = server.ask("memory")
        result = server.load(requests, MAX_TOKENS)
        after = server.ask("memory")
        stopped, code = server.stop()
    assert code == 0, log.read_text()[-3000:]
    assert {"text": warm["text"], "tokens": warm["tokens"]} == expected[0]
    got = [{"text": r["text"], "tokens": r["tokens"]} for r in result["results"]]
    wrong = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not wrong, [(i, requests[i][1], got[i], expected[i]) for i in wrong]
    assert sum(e["tokens"] for e in expected) > 10 * MAX_TOKENS  # most requests run to max_tokens
    # The model is on the device, and the load ran there: the peak during it rose above the idle server's memory.
    assert idle["devices"] == ["rbln:0"], idle
    assert server.started["before_load"]["allocated"] == 0
    assert idle["allocated"] > 0 and after["peak"] > idle["allocated"], (idle, after)
    # Nothing a request allocated outlives it; shutdown frees the model and the KV cache.
    assert after["allocated"] == idle["allocated"], (idle, after)
    assert stopped["stopped"] and stopped["after_stop"]["allocated"] == 0, stopped
