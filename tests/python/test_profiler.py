"""torch.profiler on rbln: device time in key_averages, a Chrome trace with one track per stream and
flow arrows from the launching ops, the legacy profiler, and rbln memory under profile_memory=True."""
import json

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def device_events(prof, name):
    return [e for e in prof.events() if e.name == name and e.device_type == DeviceType.PrivateUse1]


def test_mm_has_device_time():
    x = torch.randn(256, 256, device="rbln")
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            y = x @ x
        y.cpu()
    kernels = device_events(prof, "aten::mm")
    assert len(kernels) == 3  # one device kernel per launch
    assert all(k.device_index == 0 and k.time_range.elapsed_us() > 0 for k in kernels)
    mm = next(e for e in prof.key_averages() if e.key == "aten::mm")
    assert mm.count == 3
    assert mm.device_time_total > 0
    assert mm.device_time_total == pytest.approx(sum(k.time_range.elapsed_us() for k in kernels), rel=0.01)
    copies = device_events(prof, "Memcpy DtoH")
    assert len(copies) == 1


def test_chrome_trace_has_stream_tracks_and_flows(tmp_path):
    x = torch.randn(64, 64, device="rbln")
    side = torch.rbln.Stream()
    side.wait_stream(torch.rbln.current_stream())
    with profile(activities=ACTIVITIES) as prof:
        y = x + 1
        with torch.rbln.stream(side):
            z = x * 2
        torch.rbln.synchronize()
        (y + z).cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_name = {e["name"]: e for e in kernels}
    assert {"aten::add.Tensor", "aten::mul.Tensor"} <= set(by_name)
    assert by_name["aten::add.Tensor"]["pid"] == 0
    assert by_name["aten::add.Tensor"]["tid"] == 0  # the default stream's track
    assert by_name["aten::mul.Tensor"]["tid"] == side.stream_id  # the side stream's track
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names[0] == "rbln:0"
    assert any(e.get("cat") == "gpu_memcpy" and e["name"] == "Memcpy DtoH" for e in events)

    # Every device kernel ends a flow that starts at its launch on the host, inside the op that launched it.
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    launches = [e for e in events if e["name"] == "rblnLaunchKernel" and e.get("ph") == "X"]
    assert len(launches) >= len(kernels)
    for kernel in kernels:
        flow = next(f for f in ends.values() if f["pid"] == kernel["pid"] and f["tid"] == kernel["tid"]
                    and abs(f["ts"] - kernel["ts"]) < 1)
        assert flow["id"] in starts
    op = next(e for e in events if e["name"] == "aten::add" and e.get("ph") == "X")
    launch = next(e for e in launches if op["ts"] <= e["ts"] <= op["ts"] + op["dur"])
    assert launch["tid"] == op["tid"]
    # Times are real: the kernel runs after its op began (Kineto wants nanoseconds; microseconds land at 0).
    assert by_name["aten::add.Tensor"]["ts"] >= op["ts"]


def test_backward_kernels_are_linked_to_their_ops():
    w = torch.randn(32, 32, device="rbln", requires_grad=True)
    with profile(activities=ACTIVITIES) as prof:
        (w @ w).sum().backward()
        w.grad.cpu()
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].count == 3  # forward, and two in MmBackward0
    assert averages["aten::mm"].device_time_total > 0


@pytest.mark.parametrize("use_kineto", [True, False], ids=["kineto", "profiler-stubs"])
def test_legacy_profiler_with_use_device(use_kineto):
    """use_kineto=False is the KINETO_PRIVATEUSE1_FALLBACK path: device time from driver events (ProfilerStubs)."""
    x = torch.randn(128, 128, device="rbln")
    with torch.autograd.profiler.profile(use_device="rbln", use_kineto=use_kineto) as prof:
        (x @ x).cpu()
    mm = next(e for e in prof.key_averages() if e.key == "aten::mm")
    assert mm.count == 1
    assert mm.device_time_total > 0
    assert mm.cpu_time_total > 0


def test_profile_memory_reports_rbln_memory():
    torch.rbln.synchronize()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        t = torch.empty(1 << 20, dtype=torch.uint8, device="rbln")
        del t
    empty = next(e for e in prof.key_averages() if e.key == "aten::empty")
    assert empty.device_memory_usage == 1 << 20
    assert empty.cpu_memory_usage == 0
    frees = [e for e in prof.events() if e.name == "[memory]"]  # outside any op
    assert [e.device_memory_usage for e in frees] == [-(1 << 20)]


def test_device_work_outside_a_profile_is_not_recorded():
    x = torch.randn(16, device="rbln")
    (x + 1).cpu()  # before: not recorded
    with profile(activities=ACTIVITIES) as prof:
        (x * 3).cpu()
    (x - 1).cpu()  # after: recording is off again
    names = {e.name for e in prof.events() if e.device_type == DeviceType.PrivateUse1}
    assert "aten::mul.Tensor" in names
    assert not names & {"aten::add.Tensor", "aten::sub.Tensor"}
    with profile(activities=ACTIVITIES) as again:  # a second profile starts empty
        (x / 2).cpu()
    assert "aten::mul.Tensor" not in {e.name for e in again.events()}


def test_second_device_has_its_own_process_track(tmp_path):
    x = torch.randn(8, device="rbln:1")
    with profile(activities=ACTIVITIES) as prof:
        (x + 1).cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    add = next(e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::add.Tensor")
    assert (add["pid"], add["tid"]) == (1, 0)
    assert {"name": "rbln:1"} in [e["args"] for e in events if e.get("ph") == "M" and e["pid"] == 1]
    assert device_events(prof, "aten::add.Tensor")[0].device_index == 1


def test_explain_device_time_shares_the_profilers_records():
    x = torch.randn(256, 256, device="rbln")
    with profile(activities=ACTIVITIES) as prof:
        with torch.rbln.explain() as ex:  # both listen at once; each gets every record
            for _ in range(3):
                y = x @ x
        (y + 1).cpu()
    assert ex.device_launches["aten::mm"] == 3 and ex.device_time["aten::mm"] > 0
    assert "aten::add.Tensor" not in ex.device_time  # queued after the explain() block
    kernels = device_events(prof, "aten::mm")
    assert len(kernels) == 3
    assert ex.device_time["aten::mm"] == pytest.approx(sum(k.time_range.elapsed_us() for k in kernels) / 1e3, rel=0.01)
    assert "device aten::mm" in ex.report() and "device_time:" in ex.report()


def test_explain_leaves_a_failed_kernels_error_to_the_program():
    x, bad = torch.randn(8, device="rbln"), torch.tensor([100], device="rbln")
    with torch.rbln.explain() as ex:
        x.index_select(0, bad)  # fails on the device, asynchronously
    assert ex.device_launches["aten::index_select"] == 1
    with pytest.raises(IndexError, match="index out of range"):  # CPU's type for it
        torch.rbln.synchronize()
    assert torch.ones(2, device="rbln").sum().item() == 2  # usable again


def test_profile_demo_runs_as_a_user_runs_it(tmp_path):
    """examples/profile_demo.py in its own interpreter: exit status 0, a trace with device kernels linked to their
    launches, and a snapshot pickle torch.cuda._memory_viz renders."""
    import pickle
    import subprocess
    import sys

    from conftest import ROOT
    from torch.cuda import _memory_viz

    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "profile_demo.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Self RBLN" in proc.stdout  # the key_averages table; its rows are ranked by measured time
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["pid"] == 0 for e in kernels)
    assert {"aten::addmm", "aten::mm", "aten::gelu_backward"} <= {e["name"] for e in kernels}
    assert len([e for e in events if e.get("ph") == "f"]) >= len(kernels)
    with open(tmp_path / "snapshot.pickle", "rb") as f:
        snapshot = pickle.load(f)
    assert any(e["action"] == "alloc" and e["frames"] for e in snapshot["device_traces"][0])
    assert "snapshot.pickle" in _memory_viz.trace_plot(snapshot)
    assert (tmp_path / "trace.svg").read_text().startswith("<svg")
