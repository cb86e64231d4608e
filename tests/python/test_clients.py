"""Clients no one here wrote, run the way users run them: in their own processes, exit status checked."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

from conftest import ROOT

# Hugging Face continuous batching: its own device streams, the model run on a background thread under a
# stream context, host lists copied into static device tensors it reuses every step.
CONTINUOUS_BATCHING = """
from transformers import ContinuousBatchingConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)
model = LlamaForCausalLM(config).eval()
g = torch.Generator().manual_seed(1)
prompts = [torch.randint(1, 1000, (n,), generator=g).tolist() for n in (5, 9, 3, 7)]
generation = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)

def tokens(device):
    out = model.to(device).generate_batch(
        prompts, generation_config=generation,
        continuous_batching_config=ContinuousBatchingConfig(num_blocks=32, max_batch_tokens=64))
    return {k: v.generated_tokens for k, v in out.items()}

expected = tokens("cpu")
with torch.rbln.explain() as ex:
    runs = [tokens("rbln") for _ in range(10)]
print(json.dumps({"expected": expected, "runs": runs, "on_device": "aten::mm" in ex.device_ops,
                  "fallbacks": sorted(ex.fallback_ops)}))
"""


def test_continuous_batching_gives_cpu_tokens_in_every_run(run_python):
    result = run_python(CONTINUOUS_BATCHING)
    expected = result["expected"]
    assert len(expected) == 4 and all(len(t) == 12 for t in expected.values())
    assert result["on_device"] and not result["fallbacks"], result["fallbacks"]
    bad = [i for i, run in enumerate(result["runs"]) if run != expected]
    assert not bad, f"runs {bad} of 10 differ from CPU's tokens"


TRAIN_AND_EXIT = """
import torch, torch.nn.functional as F
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("rbln")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8, device="rbln"), torch.randint(0, 2, (32,), device="rbln")
for _ in range(3):
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
w = torch.ones(3, device="rbln", requires_grad=True)
(w * 2).sum().backward()
print(w.grad.cpu().tolist())
"""


def test_training_scripts_exit_cleanly_on_a_busy_machine():
    # Autograd's rbln device threads must be done with Python before the interpreter finalizes,
    # whatever the scheduler does (docs/design.md, "Exit"); one spinning process per core keeps every core busy.
    spin = "import time\nend = time.time() + 120\nwhile time.time() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        def run(_):
            return subprocess.run([sys.executable, "-c", textwrap.dedent(TRAIN_AND_EXIT)], capture_output=True,
                                  text=True, timeout=300, cwd=ROOT)

        with ThreadPoolExecutor(4) as pool:
            procs = list(pool.map(run, range(10)))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    failed = [(p.returncode, p.stderr[-500:]) for p in procs if p.returncode != 0]
    assert not failed, failed
    assert all(p.stdout.strip().splitlines()[-1] == "[2.0, 2.0, 2.0]" for p in procs)


def test_device_context_still_redirects_linspace_after_a_hugging_face_load(run_python, tmp_path):
    """transformers' from_pretrained swaps torch.linspace while it builds a model under `torch.device("meta")`:
    a first use of torch's cached device-constructor set there kept the wrapper, and every later
    `with torch.device("rbln")` left torch.linspace on the CPU."""
    result = run_python(f"""
        import sys
        sys.path.insert(0, "examples")
        import serving
        from transformers import AutoModelForCausalLM
        serving.build({str(tmp_path / "m")!r})
        AutoModelForCausalLM.from_pretrained({str(tmp_path / "m")!r})
        with torch.device("rbln"):
            x = torch.linspace(1, 3, 1)
        print(json.dumps({{"device": x.device.type, "value": x.cpu().tolist()}}))
    """)
    assert result == {"device": "rbln", "value": [1.0]}
