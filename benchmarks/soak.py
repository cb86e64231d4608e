"""Soak: vLLM's engine on rbln under the serving benchmark's load for a long run (30 minutes by default).

`python benchmarks/soak.py [--minutes 30]` builds the serving benchmark's Llama (d 512 x 4), starts vLLM's
engine on rbln in this process (the engine `vllm serve` runs, here so that the device memory can be read), and
submits rounds of the serving load (benchmarks/run.py's VLLM_REQUESTS greedy requests of VLLM_TOKENS tokens)
until the time is up. It counts errors (a round that raises, or whose first 8 tokens of a request differ from the
first round's: greedy decoding of the same prompts must repeat; later tokens of this random-weight model meet
near-ties that the batch's composition and the prefix cache's rounding decide, as the serving rows note),
samples the device's allocated and reserved memory after every round, and after dropping the engine compares
the memory with the idle level before it. It writes benchmarks/soak.json, which docs/performance.md shows (`make
bench` renders it), and exits 1 if a check fails.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: its memory is ours

import torch

import torch_rbln  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import serving  # noqa: E402
from run import VLLM_REQUESTS, VLLM_TOKENS  # noqa: E402

FLAT_MINUTES = 20  # reserved memory must not move over the run's last this many minutes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "soak.json"))
    args = p.parse_args()
    from vllm import LLM, SamplingParams

    prompts = serving.prompts(VLLM_REQUESTS)
    params = SamplingParams(temperature=0, max_tokens=VLLM_TOKENS, ignore_eos=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "llama")
        serving.build(model, hidden=512, layers=4)
        idle = serving.memory("rbln")
        llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.3,
                  max_num_seqs=VLLM_REQUESTS)
        expected = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
        start, samples, errors, diverged = time.monotonic(), [], [], 0
        while time.monotonic() - start < args.minutes * 60:
            try:
                got = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
                if [t[:8] for t in got] != [t[:8] for t in expected]:
                    errors.append(f"round {len(samples)}: first tokens differ from the first round's")
                diverged += got != expected
            except Exception as e:  # counted, and the soak goes on: does the engine recover?
                errors.append(f"round {len(samples)}: {type(e).__name__}: {e}")
            samples.append({"t": time.monotonic() - start, **serving.memory("rbln")})
        del llm
        gc.collect()
        torch.rbln.empty_cache()
        after = serving.memory("rbln")
    # Tensors that packages vLLM imports made at module level while rbln was vLLM's default device stay, as they
    # would on CUDA: the idle level allows them (the allocator's 512-byte blocks).
    with warnings.catch_warnings():  # isinstance on deprecated module attributes warns
        warnings.simplefilter("ignore")
        kept = sum(-(-v.untyped_storage().nbytes() // 512) * 512 for m in list(sys.modules.values())
                   for v in list(vars(m).values()) if isinstance(v, torch.Tensor) and v.device.type == "rbln")
    last = [s["reserved"] for s in samples if s["t"] >= samples[-1]["t"] - FLAT_MINUTES * 60]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": args.minutes,
        "requests_per_round": VLLM_REQUESTS, "tokens_per_request": VLLM_TOKENS, "rounds": len(samples),
        "errors": errors, "rounds_diverging_after_8_tokens": diverged, "idle": idle, "after": after,
        "peak_reserved": max(s["reserved"] for s in samples),
        "flat_minutes": min(FLAT_MINUTES, args.minutes),
        "reserved_range_over_flat_minutes": max(last) - min(last),
        "allocated_after_minus_idle": after["allocated"] - idle["allocated"], "module_level_tensors": kept,
    }
    result["passed"] = (not errors and result["reserved_range_over_flat_minutes"] == 0
                        and result["allocated_after_minus_idle"] <= kept)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "errors"} | {"errors": len(errors)}))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
