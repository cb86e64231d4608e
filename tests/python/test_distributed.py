"""torch.distributed on rbln-ccl, run the way users run it: torchrun in subprocesses (one node
with 2 or 4 ranks, and 2 nodes of 1 rank on loopback), each with a short timeout so a hang fails
the test instead of CI. The scripts in distributed/ compare against CPU answers themselves and
print one JSON line per rank; here we check exit status, that every rank reported, and what."""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = ROOT / "tests" / "python" / "distributed"
TIMEOUT = 240


def _env(devices):
    return {**os.environ, "RBLN_DEVICE_COUNT": str(devices), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}


def _reports(stdout, ranks):
    reports = sorted((json.loads(line) for line in stdout.splitlines() if line.startswith("{")), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(ranks)), stdout
    return reports


def torchrun(script, *args, nproc=2, devices=2, env=None):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(SCRIPTS / script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={**_env(devices), **(env or {})},
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return _reports(done.stdout, nproc)


def two_nodes(script, *args):
    """Two torchrun invocations of one rank each, rendezvous on loopback, as on two machines."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                               f"--node_rank={n}", "--master_addr=127.0.0.1", f"--master_port={port}",
                               str(SCRIPTS / script), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(2), cwd=ROOT)
             for n in range(2)]
    try:
        outputs = [node.communicate(timeout=TIMEOUT) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, out[-3000:] + err[-3000:]
    return _reports("".join(out for out, _ in outputs), 2)


def assert_collectives(reports):
    for r in reports:
        assert r["failures"] == [] and r["backend"] == "rbln-ccl", r
        assert r["checked"] >= 130, r  # every collective x dtype ran and was compared


def test_every_collective_on_rbln_with_no_backend_named():
    # init_process_group() picks rbln-ccl for the rbln accelerator, as it picks NCCL for CUDA.
    assert_collectives(torchrun("collectives.py", "rbln"))


def test_every_collective_under_strict_mode():
    # Gloo works on device tensors in place only while the lane's task runs: strict mode makes
    # device memory unreadable at any other time.
    assert_collectives(torchrun("collectives.py", "rbln", env={"RBLN_STRICT": "1"}))


def test_every_collective_on_cpu_tensors_through_rbln_ccl():
    assert_collectives(torchrun("collectives.py", "cpu", "rbln-ccl"))


def test_every_collective_with_a_backend_per_device():
    reports = torchrun("collectives.py", "rbln", "cpu:gloo,rbln:rbln-ccl")
    assert_collectives(reports)
    assert reports[0]["get_backend"] == "cpu:gloo,rbln:rbln-ccl"


@pytest.mark.parametrize("device", ["rbln", "cpu"])
def test_every_collective_on_two_nodes(device):
    assert_collectives(two_nodes("collectives.py", device, "rbln-ccl"))


TRAINING_MODES = ["ddp", "ddp_device_ids", "ddp_fp16_hook", "ddp_bf16_hook", "ddp_unused", "fsdp2", "fsdp2_mixed",
                  "dtensor"]


def training(reports, modes):
    """Each rank's report of each mode, which must have trained without a mismatch."""
    for r in reports:
        assert sorted(r["modes"]) == sorted(modes), r
        for mode in modes:
            assert r["modes"][mode]["failures"] == [], (mode, r)
    return reports


def test_training_matches_one_process_and_its_sharded_checkpoint_loads_into_another_world_size(tmp_path):
    # All modes one after another in one launch and one process group (a launch costs more than a mode's training);
    # the last saves a sharded checkpoint that one process then loads.
    modes = TRAINING_MODES + ["dcp_save"]
    for r in training(torchrun("train.py", ",".join(modes), str(tmp_path / "ckpt")), modes):
        for mode in TRAINING_MODES:
            if mode.startswith("ddp"):
                # torch 2.13 names every out-of-tree backend's group "custom" (docs/distributed.md).
                assert r["modes"][mode]["ddp_backend_name"] == "custom", (mode, r)
        assert r["modes"]["dcp_save"]["mesh"] == [2], r
    (loaded,) = training(torchrun("train.py", "dcp_load", str(tmp_path / "ckpt"), nproc=1), ["dcp_load"])
    assert loaded["modes"]["dcp_load"]["mesh"] == [1], loaded


def test_hsdp_on_a_2x2_mesh():
    for r in training(torchrun("train.py", "hsdp", nproc=4, devices=4), ["hsdp"]):
        assert r["modes"]["hsdp"]["mesh"] == [2, 2], r


def test_training_on_two_nodes():
    for r in training(two_nodes("train.py", "ddp,fsdp2", "--backend", "rbln-ccl"), ["ddp", "fsdp2"]):
        assert r["backend"] == "rbln-ccl", r


def test_bad_input_and_a_timed_out_collective():
    rank0, rank1 = torchrun("errors.py")
    for r in (rank0, rank1):
        assert r["mixed_devices"].startswith("RuntimeError: rbln-ccl: all tensors of a collective must be on one device")
        assert r["after_bad_input"] == [3.0] * 4  # the group and the device still work
    assert rank0["timeout"].startswith("RuntimeError: rbln-ccl collective:") and "Timed out" in rank0["timeout"]
    assert rank0["work_exception"]
    assert rank0["later_collective"].startswith("DistBackendError: rbln-ccl: an earlier collective failed")
    assert rank0["device_still_works"] == [0, 2, 4, 6]
