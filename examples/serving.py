"""`transformers serve` on rbln: a local checkpoint to serve, a load generator, and a server that reports memory.

    python examples/serving.py build DIR             # a small random Llama and its tokenizer, saved to DIR
    python examples/serving.py serve DIR [OPTIONS]   # `transformers serve DIR OPTIONS` in this process; reads
                                                     # commands on stdin: `memory` prints the device's memory
                                                     # statistics as JSON, `stop` (or EOF) shuts it down
Nothing is downloaded: the tokenizer is a word-level vocabulary built here (docs/serving.md).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")  # the CLI would ask PyPI for a newer transformers

WORDS = [f"w{i}" for i in range(250)]
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# Words only, separated by spaces: decoding joins tokens with spaces, so a completion's text gives back its tokens.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}assistant :{% endif %}")


def build(path: str, hidden: int = 128, layers: int = 2) -> None:
    """A Llama with random weights and a word-level tokenizer with a chat template, saved to `path`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + ["user", "assistant", "system", ":"] + WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>", clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    # A wide initialization spreads the logits, so greedy choices are far from ties that rounding could flip.
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, initializer_range=0.2, bos_token_id=1, eos_token_id=2,
                         pad_token_id=3)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def prompts(count: int, seed: int = 0) -> list[str]:
    """`count` prompts of different lengths (3 to 3 + 2 * count words)."""
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(3 + 2 * i)) for i in range(count)]


def cpu_greedy(path: str, requests: list[tuple[str, bool]], max_tokens: int) -> list[dict]:
    """Hugging Face `generate` on CPU for each (prompt, chat) request: {"text", "tokens"} as a server answers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    expected = []
    for prompt, chat in requests:
        if chat:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                return_dict=True, return_tensors="pt")["input_ids"]
        else:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            new = model.generate(ids, max_new_tokens=max_tokens, do_sample=False)[0, ids.shape[1]:]
        expected.append({"text": tokenizer.decode(new, skip_special_tokens=True), "tokens": len(new)})
    return expected


def post(port: int, route: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def completion(port: int, model: str, prompt: str, max_tokens: int, chat: bool, timeout: float = 30) -> dict:
    """One greedy request: {"text", "tokens" (completion_tokens), "latency" (s)}."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    if chat:
        out = post(port, "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]}, timeout)
        text = out["choices"][0]["message"]["content"]
    else:
        out = post(port, "/v1/completions", {**body, "prompt": prompt}, timeout)
        text = out["choices"][0]["text"]
    return {"text": text, "tokens": out["usage"]["completion_tokens"], "latency": time.perf_counter() - start}


def load(port: int, model: str, requests: list[tuple[str, bool]], max_tokens: int, timeout: float = 30) -> dict:
    """All `requests` ((prompt, chat) pairs) at once; {"results" (in order), "wall" (s)}."""
    start = time.perf_counter()
    with ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(lambda r: completion(port, model, r[0], max_tokens, r[1], timeout), requests))
    return {"results": results, "wall": time.perf_counter() - start}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _HTTPServer:
    """A server subprocess (`proc`) on a loopback `port`: `__enter__` waits for its /health, `load()` sends it
    requests, `__exit__` kills what is still running."""
    port: int
    model: str
    timeout: float
    proc: subprocess.Popen

    def __enter__(self):
        try:
            self.started = self._started()
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).close()
                    return self
                except (urllib.error.URLError, ConnectionError):
                    if time.monotonic() > deadline or self.proc.poll() is not None:
                        raise TimeoutError(f"server not healthy (exit status {self.proc.poll()})")
                    time.sleep(0.2)
        except BaseException:
            self.__exit__()
            raise

    def _started(self) -> dict | None:
        return None

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def load(self, requests: list[tuple[str, bool]], max_tokens: int) -> dict:
        return load(self.port, self.model, requests, max_tokens, timeout=self.timeout)


class Server(_HTTPServer):
    """`python examples/serving.py serve MODEL OPTIONS` in a subprocess on a free loopback port, its stderr to `log`:
    `with Server(...) as server:` returns once it answers /health; `ask("memory")`; `stop()` -> (reply, exit status)."""

    def __init__(self, model: str, options: list[str], log: str, timeout: float = 60):
        self.port, self.model, self.timeout = free_port(), model, timeout
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "serve", model, *options, "--host", "127.0.0.1",
                 "--port", str(self.port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        # Its stdout also carries uvicorn's access log: a thread reads every line, reply() picks the JSON ones.
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # end of output: the server exited

    def _started(self) -> dict:
        return self.reply()

    def reply(self) -> dict:
        """The next JSON line the server prints, within the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError("no reply from the server") from None
            if not line:
                raise RuntimeError(f"server exited ({self.proc.wait()}) before replying")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.reply()

    def stop(self) -> tuple[dict, int]:
        stopped = self.ask("stop")
        return stopped, self.proc.wait(timeout=self.timeout)


class VLLMServer(_HTTPServer):
    """`vllm serve MODEL OPTIONS` (on rbln through torch_rbln's vLLM platform plugin, docs/serving.md) in a
    subprocess on a free loopback port, its output to `log`: `with VLLMServer(...) as server:` returns once it
    answers /health; `stop()` sends SIGTERM, as a user's Ctrl-C, and returns the exit status."""

    def __init__(self, model: str, options: list[str], log: str, timeout: float = 120):
        self.port, self.model, self.timeout = free_port(), model, timeout
        vllm = os.path.join(os.path.dirname(sys.executable), "vllm")
        with open(log, "w") as out:
            self.proc = subprocess.Popen([vllm, "serve", model, "--host", "127.0.0.1", "--port", str(self.port),
                                          *options], stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=self.timeout)


def memory(device: str) -> dict:
    """The rbln device's memory; "peak" is since the last call (it resets the peak)."""
    import torch

    torch.rbln.synchronize(device)
    stats = {"allocated": torch.rbln.memory_allocated(device), "reserved": torch.rbln.memory_reserved(device),
             "peak": torch.rbln.max_memory_allocated(device)}
    torch.rbln.reset_peak_memory_stats(device)
    return stats


def devices(server) -> list[str]:
    """Where the server's loaded models' weights are."""
    return sorted({str(p.device) for m in server._model_manager.loaded_models.values() for p in m.model.parameters()})


def serve(argv: list[str]) -> int:
    """Runs the `transformers serve` command line in this process (its test-only `--non-blocking`: uvicorn on a
    thread) and answers `memory` / `stop` on stdin, so a client can read the device's memory before and after load."""
    from transformers.cli.transformers import app

    device = argv[argv.index("--device") + 1] if "--device" in argv else "auto"
    on_rbln = device.startswith("rbln")
    before = memory(device) if on_rbln else {}
    server = app(["serve", *argv, "--non-blocking"], standalone_mode=False)
    print(json.dumps({"ready": True, "before_load": before}), flush=True)
    for line in sys.stdin:
        if line.strip() != "memory":
            break
        print(json.dumps({**(memory(device) if on_rbln else {}), "devices": devices(server)}), flush=True)
    server.kill_server()
    server._thread.join(timeout=10)
    print(json.dumps({"stopped": not server._thread.is_alive(), "after_stop": memory(device) if on_rbln else {}}),
          flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        build(sys.argv[2])
    elif sys.argv[1:2] == ["serve"]:
        sys.exit(serve(sys.argv[2:]))
    else:
        sys.exit(__doc__)
