"""Hugging Face's Trainer and accelerate on rbln with nothing set by hand (no ACCELERATE_TORCH_DEVICE, no
device named), as on CUDA: each run in its own processes, exit status checked, losses against CPU's.
torch_rbln/_huggingface.py says what rbln answers for them (docs/training.md)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = ROOT / "tests" / "python" / "distributed"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

ONE_PROCESS = """
import sys, tempfile
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.state import AcceleratorState

sys.path.insert(0, "tests/python/distributed")
import hf_trainer

out = tempfile.mkdtemp()
runs = {f"{device}{'_bf16' * bf16}": hf_trainer.train(4, out, use_cpu=device == "cpu", bf16=bf16)
        for bf16 in (False, True) for device in ("cpu", "rbln")}


def accelerate_bf16(cpu):
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=cpu, mixed_precision="bf16")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    inner = set()
    model[0].register_forward_hook(lambda module, inputs, output: inner.add(str(output.dtype)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=g).to(accelerator.device), torch.randint(0, 2, (32,), generator=g)
    losses = []
    for _ in range(3):
        with accelerator.autocast():
            mm = torch.mm(x, x.t())
        loss = F.cross_entropy(model(x), y.to(accelerator.device))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"device": str(accelerator.device), "mm": [str(mm.dtype), mm.device.type], "inner": sorted(inner),
            "output": str(model(x).dtype), "params": str(next(model.parameters()).device), "losses": losses}


runs["accelerate_cpu"], runs["accelerate_rbln"] = accelerate_bf16(True), accelerate_bf16(False)
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def one_process(run_python):
    return run_python(ONE_PROCESS, **OFFLINE)


def test_trainer_trains_on_rbln_with_cpus_losses(one_process):
    cpu, rbln = one_process["cpu"], one_process["rbln"]
    assert cpu["device"] == "cpu" and cpu["params"] == ["cpu"]  # use_cpu=True keeps the CPU
    assert rbln["device"] == "rbln:0" and rbln["params"] == ["rbln:0"], rbln
    assert rbln["device_mm"] > 0 and rbln["parallel_mode"] == "ParallelMode.NOT_PARALLEL"
    assert len(cpu["losses"]) == 4
    assert rbln["losses"] == pytest.approx(cpu["losses"], rel=1e-6)
    # The Trainer's default optimizer (adamw_torch_fused) steps on the device too.
    assert rbln["fallbacks"] == [], rbln["fallbacks"]


def test_trainer_bf16_autocasts_on_rbln(one_process):
    cpu, rbln = one_process["cpu_bf16"], one_process["rbln_bf16"]
    assert rbln["device"] == "rbln:0" and rbln["params"] == ["rbln:0"]
    assert rbln["dtypes"] == cpu["dtypes"] == ["torch.bfloat16"]
    assert one_process["rbln"]["dtypes"] == ["torch.float32"]
    assert rbln["losses"] == pytest.approx(cpu["losses"], rel=1e-3)  # bfloat16 rounding: close, not equal


def test_accelerator_bf16_autocasts_on_rbln(one_process):
    cpu, rbln = one_process["accelerate_cpu"], one_process["accelerate_rbln"]
    assert rbln["device"] == "rbln" and rbln["params"] == "rbln:0"
    assert rbln["mm"] == ["torch.bfloat16", "rbln"] and cpu["mm"] == ["torch.bfloat16", "cpu"]
    assert rbln["inner"] == ["torch.bfloat16"] and rbln["output"] == "torch.float32"  # outputs back to float32
    assert rbln["losses"] == pytest.approx(cpu["losses"], rel=1e-3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAUNCHERS = {
    "torchrun": lambda: ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"],
    "accelerate": lambda: ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes=2",
                           "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no",
                           f"--main_process_port={_free_port()}"],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_ranks_train_data_parallel_on_rbln_ccl(launcher, one_process, tmp_path):
    # HF_HOME: no accelerate config file of the machine's applies.
    env = {**os.environ, **OFFLINE, "HF_HOME": str(tmp_path / "hf"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
           "RBLN_DEVICE_COUNT": "2"}
    cmd = [sys.executable, *LAUNCHERS[launcher](), str(SCRIPTS / "hf_trainer.py"), str(tmp_path / "out")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = sorted((json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1], done.stdout
    for r in ranks:
        assert r["world"] == 2 and r["backend"] == "rbln-ccl" and r["wrapped"] == "DistributedDataParallel", r
        assert r["device"] == f"rbln:{r['rank']}" and r["params"] == [r["device"]], r
        assert r["parallel_mode"] == "ParallelMode.DISTRIBUTED" and r["distributed_type"] == "DistributedType.MULTI_GPU"
        # 2 sequences a rank a step: the one process's 4, so its losses (averaged over the ranks)
        assert r["losses"] == pytest.approx(one_process["cpu"]["losses"], rel=1e-5), r["losses"]
    assert ranks[0]["checksum"] == ranks[1]["checksum"]  # the replicas stayed equal
