"""vLLM on rbln through the torch_rbln.vllm platform plugin (docs/serving.md): `LLM.generate` in one process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) gives Hugging Face's greedy tokens on CPU, with the weights and the KV
cache on rbln and no CPU fallback while generating; `vllm serve` answers concurrent OpenAI requests with the
same tokens."""
from __future__ import annotations

import json
import sys
import urllib.request

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import serving  # noqa: E402

MAX_TOKENS = 8


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vllm") / "tiny-llama")
    serving.build(path, hidden=64)
    return path


def hf_greedy(checkpoint: str, prompts: list[str]) -> list[list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    out = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        new = model.generate(ids, max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS, do_sample=False)
        out.append(new[0, ids.shape[1]:].tolist())
    return out


def hf_logprobs(checkpoint: str, prompt: str, tokens: list[int]) -> list[float]:
    """The log-probability Hugging Face's model on CPU gives each of `tokens` after `prompt` and the ones before."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = AutoTokenizer.from_pretrained(checkpoint)(prompt, return_tensors="pt")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    full = torch.cat([ids, torch.tensor([tokens])], 1)
    with torch.no_grad():
        logits = model(full).logits[0, ids.shape[1] - 1:-1].log_softmax(-1)
    return [logits[i, t].item() for i, t in enumerate(tokens)]


def test_llm_generate_with_chunked_prefill_and_prefix_caching_matches_hugging_face_on_cpu(run_python, checkpoint):
    """Prompts of 20 to 26 tokens in steps of 16 tokens (chunked prefill), then again (their first block from
    the prefix cache): both times Hugging Face's greedy tokens. On the same engine, vLLM's sampling options:
    seeded sampling with n=2 reproduces itself, logprobs are Hugging Face's log-softmax on CPU, a stop string
    ends the text."""
    prompts = serving.prompts(12)[-4:]
    got = run_python(f"""
        from vllm import LLM, SamplingParams
        from vllm.platforms import current_platform

        baseline = torch.rbln.memory_allocated()
        llm = LLM(model={checkpoint!r}, dtype="float32", enforce_eager=True, max_model_len=256,
                  gpu_memory_utilization=0.2, max_num_seqs=8, enable_prefix_caching=True,
                  enable_chunked_prefill=True, max_num_batched_tokens=16)
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        params = SamplingParams(temperature=0, max_tokens={MAX_TOKENS}, ignore_eos=True)
        with torch.rbln.explain() as ex:
            runs = [llm.generate({prompts!r}, params) for _ in range(2)]
        # vLLM's other sampling options on the same engine: seeded sampling (n=2) twice, greedy with logprobs,
        # and a stop string taken from the greedy text.
        seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=7, n=2, max_tokens={MAX_TOKENS}, ignore_eos=True)
        samples = [[list(c.token_ids) for c in llm.generate({prompts[0]!r}, seeded)[0].outputs] for _ in range(2)]
        logprobs = llm.generate({prompts[0]!r}, SamplingParams(temperature=0, max_tokens={MAX_TOKENS},
                                                              ignore_eos=True, logprobs=2))[0].outputs[0]
        greedy_text = runs[0][0].outputs[0].text
        stop = greedy_text[len(greedy_text) // 2:][:3]
        stopped = llm.generate({prompts[0]!r}, SamplingParams(temperature=0, max_tokens={MAX_TOKENS}, ignore_eos=True,
                                                              stop=[stop]))[0].outputs[0]
        errors = []  # bad input gets vLLM's own errors, and the engine goes on
        for bad in (lambda: llm.generate({prompts[0]!r} * 100, params),  # far over max_model_len
                    lambda: SamplingParams(temperature=-1.0)):
            try:
                bad()
            except Exception as e:
                errors.append(f"{{type(e).__name__}}: {{e}}")
        after = [list(o.outputs[0].token_ids) for o in llm.generate({prompts!r}, params)]
        weights = sorted({{str(p.device.type) for p in runner.model.parameters()}})
        kv_cache = sorted({{str(t.device.type) for t in runner.kv_caches}})
        import gc, sys
        held = torch.rbln.memory_allocated()
        del llm, runner
        gc.collect()
        # Module-level tensors a package made on import while vLLM had rbln as the default device stay (on CUDA
        # they would stay on CUDA): what may remain beyond the baseline, in the allocator's 512-byte blocks.
        module_tensors = [[name, key, -(-value.untyped_storage().nbytes() // 512) * 512]
                          for name, module in list(sys.modules.items()) for key, value in list(vars(module).items())
                          if isinstance(value, torch.Tensor) and value.device.type == "rbln"]
        print(json.dumps({{
            "errors": errors, "after": after, "module_tensors": module_tensors,
            "baseline": baseline, "held": held, "released": torch.rbln.memory_allocated(),
            "samples": samples,
            "logprobs": [{{str(t): lp.logprob for t, lp in step.items()}} for step in logprobs.logprobs],
            "logprob_tokens": list(logprobs.token_ids),
            "greedy_text": greedy_text, "stop": stop, "stopped": [stopped.text, stopped.finish_reason],
            "platform": current_platform.device_type,
            "tokens": [[list(o.outputs[0].token_ids) for o in outs] for outs in runs],
            "cached": [o.num_cached_tokens for o in runs[1]],
            "fallbacks": ex.fallback_ops,
            "weights": weights, "kv_cache": kv_cache,
        }}))
    """, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    assert got["platform"] == "rbln"  # chosen through the vllm.platform_plugins entry point
    assert got["weights"] == ["rbln"] and got["kv_cache"] == ["rbln"]
    assert got["fallbacks"] == {}
    assert got["cached"] == [16] * 4
    expected = hf_greedy(checkpoint, prompts)
    assert got["tokens"] == [expected, expected]
    # Seeded sampling: two completions per request, the same in both runs.
    assert len(got["samples"][0]) == 2 and got["samples"][0] == got["samples"][1]
    assert all(len(tokens) == MAX_TOKENS for tokens in got["samples"][0])
    # Logprobs of the greedy tokens: Hugging Face's log-softmax on CPU, the chosen token among the top two.
    assert got["logprob_tokens"] == expected[0]
    for token, step, reference in zip(expected[0], got["logprobs"], hf_logprobs(checkpoint, prompts[0], expected[0])):
        assert str(token) in step and len(step) <= 3, step  # the sampled token plus the top 2
        assert abs(step[str(token)] - reference) < 1e-3, (step, reference)
    # A prompt over the context and a negative temperature: vLLM's errors; then the same tokens again.
    assert len(got["errors"]) == 2, got["errors"]
    assert got["errors"][0].startswith("VLLMValidationError: This model's maximum context length is 256 tokens")
    assert got["errors"][1].startswith("VLLMValidationError: temperature must be non-negative"), got["errors"]
    # Dropping the engine frees its weights and KV cache on the device.
    assert got["held"] > 1 << 20, got["held"]
    assert got["released"] - got["baseline"] <= sum(size for *_, size in got["module_tensors"]), got
    assert all(not name.startswith("vllm") for name, *_ in got["module_tensors"]), got["module_tensors"]
    assert got["after"] == expected
    # A stop string ends the text before it.
    text, reason = got["stopped"]
    assert reason == "stop" and text == got["greedy_text"][:got["greedy_text"].index(got["stop"])], got


def test_graph_mode_replays_decode_steps_with_hugging_faces_tokens(run_python, checkpoint):
    """Without enforce_eager, vLLM compiles the model (torch.compile: Dynamo once, Inductor for rbln), captures
    a graph of the compiled decode step for each batch size of its capture list (torch_rbln.vllm.graphs) and
    replays it for decode batches padded up to the next size: 6 and then 3 requests (padded to 8 and 4) give
    Hugging Face's greedy tokens on CPU; prefills run the compiled model without graphs. With async scheduling
    (torch_rbln.vllm.runner), as every test here."""
    prompts = serving.prompts(12)[-6:]
    got = run_python(f"""
        from vllm import LLM, SamplingParams
        from vllm.compilation.counter import compilation_counter
        from torch_rbln.rbln.graphs import RBLNGraph

        replays = []
        replay = RBLNGraph.replay
        RBLNGraph.replay = lambda self: (replays.append(self), replay(self))[1]
        llm = LLM(model={checkpoint!r}, dtype="float32", max_model_len=256, gpu_memory_utilization=0.2,
                  max_num_seqs=8, enable_prefix_caching=True)
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        params = SamplingParams(temperature=0, max_tokens={MAX_TOKENS}, ignore_eos=True)
        with torch.rbln.explain() as ex:
            tokens = [[list(o.outputs[0].token_ids) for o in llm.generate(batch, params)]
                      for batch in ({prompts!r}, {prompts[:3]!r})]
        compilation = llm.llm_engine.vllm_config.compilation_config
        print(json.dumps({{"tokens": tokens, "wrapper": type(runner.model).__name__, "fallbacks": ex.fallback_ops,
                          "compile": [compilation.mode.name, compilation.backend,
                                      compilation_counter.num_aot_compiles + compilation_counter.num_aot_artifacts_loaded],
                          "async": llm.llm_engine.vllm_config.scheduler_config.async_scheduling,
                          "sizes": sorted(d.num_tokens for d in runner.model.concrete_cudagraph_entries),
                          "replays": len(replays), "graphs_replayed": len(set(map(id, replays)))}}))
    """, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    assert got["wrapper"] == "RBLNGraphWrapper" and got["sizes"] == [1, 2, 4, 8], got
    assert got["compile"] == ["DYNAMO_TRACE_ONCE", "inductor", 1], got  # compiled (or loaded from vLLM's cache)
    assert got["async"]  # vLLM's default, scheduling the next step while the device computes
    assert got["fallbacks"] == {}
    # Each batch: one prefill step (eager), then MAX_TOKENS - 1 decode steps, each one replay (of the 8 and 4 graphs).
    assert got["replays"] == 2 * (MAX_TOKENS - 1) and got["graphs_replayed"] == 2, got
    assert got["tokens"] == [hf_greedy(checkpoint, prompts), hf_greedy(checkpoint, prompts[:3])]


def streamed_text(port: int, model: str, prompt: str, chat: bool) -> str:
    """A greedy completion or chat with `"stream": true`: its server-sent events' pieces joined."""
    body = {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    route, body = (("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]}) if chat
                   else ("/v1/completions", {**body, "prompt": prompt}))
    request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    pieces, events = [], 0
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            pieces.append(choice["delta"].get("content") or "" if chat else choice["text"])
            events += 1
    assert events > 1, pieces  # streamed as it was generated, not in one piece
    return "".join(pieces)


def test_an_alibi_model_gives_hugging_faces_tokens(run_python, checkpoint, tmp_path):
    """BLOOM (ALiBi: per-head slopes instead of rotary positions) through vLLM's own model code: the rbln backend
    passes the slopes to rbln::paged_attention, and the greedy tokens are Hugging Face's on CPU."""
    import torch
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    path = str(tmp_path / "tiny-bloom")
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    torch.manual_seed(0)
    config = BloomConfig(vocab_size=len(tokenizer), hidden_size=64, n_layer=2, n_head=4, initializer_range=0.2,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3)
    BloomForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    prompts = serving.prompts(4)
    got = run_python(f"""
        from vllm import LLM, SamplingParams

        llm = LLM(model={path!r}, dtype="float32", enforce_eager=True, max_model_len=256,
                  gpu_memory_utilization=0.2, max_num_seqs=8)
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        impls = [m.impl for m in runner.model.modules() if hasattr(m, "impl")]
        with torch.rbln.explain() as ex:
            outs = llm.generate({prompts!r}, SamplingParams(temperature=0, max_tokens={MAX_TOKENS}, ignore_eos=True))
        print(json.dumps({{"tokens": [list(o.outputs[0].token_ids) for o in outs], "fallbacks": ex.fallback_ops,
                          "alibi": [i.alibi_slopes is not None for i in impls],
                          "paged": ex.device_ops.get("rbln::paged_attention", 0)}}))
    """, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    assert got["alibi"] == [True, True] and got["paged"] > 0 and got["fallbacks"] == {}
    assert got["tokens"] == hf_greedy(path, prompts)


def test_vllm_serve_answers_concurrent_requests_with_cpu_tokens_and_exits_cleanly(checkpoint, tmp_path):
    """`vllm serve` as users run it (engine core in its own process, graph mode: decode steps replayed) with 24 KV
    blocks of 16 tokens, fewer than the requests need at once: 32 concurrent completions and chats (queued by
    vLLM) give Hugging Face's greedy text on CPU, and so do a streamed completion and chat; SIGTERM shuts it down
    with exit status 0."""
    requests = [(prompt, i % 2 == 1) for i, prompt in enumerate(serving.prompts(32))]
    expected = serving.cpu_greedy(checkpoint, requests, MAX_TOKENS)
    log = tmp_path / "serve.log"
    with serving.VLLMServer(checkpoint, ["--dtype", "float32", "--max-model-len", "256",
                                         "--gpu-memory-utilization", "0.2", "--max-num-seqs", "8",
                                         "--num-gpu-blocks-override", "24"],  # fewer than 32 requests need
                            str(log)) as server:
        results = server.load(requests, MAX_TOKENS)["results"]
        streamed = [streamed_text(server.port, checkpoint, prompt, chat) for prompt, chat in requests[:2]]
        assert server.stop() == 0, log.read_text()
    assert "Capturing CUDA graphs (decode, FULL): 100%" in log.read_text()
    # vLLM decodes a continuation of the prompt, so its text starts with the separating space; words are tokens.
    assert [{"text": r["text"].lstrip(), "tokens": r["tokens"]} for r in results] == expected
    assert [text.lstrip() for text in streamed] == [e["text"] for e in expected[:2]]  # streamed, the same text


@pytest.mark.parametrize("window", [None, 5])
def test_attention_of_a_step_equals_a_float64_reference(window):
    """The backend's forward for a step that holds a decoded token and a prefill chunk (one call of the device
    kernel rbln::paged_attention; GQA, vLLM's permuted block layout, an optional sliding window) against causal
    SDPA in float64 over each request's own keys on CPU."""
    import torch
    import torch.nn.functional as F
    from torch_rbln.vllm.attention import RBLNAttentionImpl, RBLNAttentionMetadata

    torch.manual_seed(0)
    heads, kv_heads, dim, block = 4, 2, 8, 4
    cache = torch.randn(12, block, kv_heads, 2 * dim).permute(0, 2, 1, 3)  # [blocks, H, block_size, 2D]
    table, contexts, lengths = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 11]], dtype=torch.int32), [10, 15], [1, 6]
    query = torch.randn(sum(lengths), heads, dim)
    impl = RBLNAttentionImpl(num_heads=heads, head_size=dim, scale=dim ** -0.5, num_kv_heads=kv_heads,
                             sliding_window=window)
    starts = torch.tensor([0, 1, 7], dtype=torch.int32)
    meta = RBLNAttentionMetadata(7, starts.rbln(), torch.tensor(contexts, dtype=torch.int32).rbln(), table.rbln(),
                                 torch.zeros(7, dtype=torch.int64).rbln())
    out = torch.zeros(8, heads, dim).rbln()  # a padded row past the step's tokens stays as it was
    with torch.rbln.explain() as ex:
        impl.forward(None, query.rbln(), None, None, cache.rbln(), meta, out)
    assert not ex.fallback_ops and ex.device_ops.get("rbln::paged_attention") == 1
    assert torch.equal(out.cpu()[7], torch.zeros(heads, dim))
    for r, context in enumerate(contexts):
        kv = cache[table[r].long()].transpose(0, 1).reshape(kv_heads, -1, 2 * dim)[:, :context].double()
        k = kv[..., :dim].repeat_interleave(heads // kv_heads, 0)
        v = kv[..., dim:].repeat_interleave(heads // kv_heads, 0)
        for t in range(starts[r], starts[r + 1]):
            last = context - starts[r + 1].item() + t
            keys = (torch.arange(context) <= last) & (torch.arange(context) > (-1 if window is None else last - window))
            expected = F.scaled_dot_product_attention(query[t].double().unsqueeze(1), k[:, keys], v[:, keys],
                                                      scale=dim ** -0.5)[:, 0]
            torch.testing.assert_close(out.cpu()[t].double(), expected, rtol=1e-5, atol=1e-5)


def test_tensor_parallel_2_over_rbln_ccl_matches_hugging_face_on_cpu(checkpoint, tmp_path):
    """`LLM(..., tensor_parallel_size=2)` as users run it (a worker process per rank, each on its own rbln device,
    collectives over rbln-ccl in inference mode): Hugging Face's greedy tokens on CPU; exit status 0."""
    import os
    import subprocess

    prompts = serving.prompts(6)[-3:]
    script = tmp_path / "tp2.py"
    script.write_text(f"""
import json
import torch
from vllm import LLM, SamplingParams


def where(worker):
    import torch.distributed as dist
    runner = worker.model_runner
    return {{"device": str(worker.device), "backend": str(dist.get_backend()),
             "weights": sorted({{str(p.device) for p in runner.model.parameters()}}),
             "kv_cache": sorted({{str(t.device) for t in runner.kv_caches}})}}


if __name__ == "__main__":
    llm = LLM(model={checkpoint!r}, dtype="float32", max_model_len=256,  # graph mode asked for: ranks run eagerly
              gpu_memory_utilization=0.2, max_num_seqs=8, tensor_parallel_size=2)
    out = llm.generate({prompts!r}, SamplingParams(temperature=0, max_tokens={MAX_TOKENS}, ignore_eos=True))
    print(json.dumps({{"tokens": [list(o.outputs[0].token_ids) for o in out], "workers": llm.collective_rpc(where)}}))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "RBLN_DEVICE_COUNT": "2", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
                               "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})  # collective_rpc of a function
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"tokens"')))
    assert got["tokens"] == hf_greedy(checkpoint, prompts)
    assert [w["device"] for w in got["workers"]] == ["rbln:0", "rbln:1"], got["workers"]
    for w in got["workers"]:
        assert w["weights"] == [w["device"]] and w["kv_cache"] == [w["device"]] and "rbln-ccl" in w["backend"], w
