"""Memory history and snapshots in torch.cuda.memory's format, read by torch.cuda._memory_viz."""
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

MiB = 1 << 20


@pytest.fixture
def history():
    torch.rbln.synchronize()
    torch.rbln.empty_cache()
    torch.rbln._record_memory_history(enabled="all", context="all", stacks="python")
    yield
    torch.rbln._record_memory_history(enabled=None)


def allocate_in_a_named_function():
    return torch.empty(3 * MiB, dtype=torch.uint8, device="rbln")


def block_of(snapshot, address):
    return next(b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address)


def test_live_block_has_its_allocation_stack(history):
    t = allocate_in_a_named_function()
    snap = torch.rbln._snapshot()
    block = block_of(snap, t.untyped_storage().data_ptr())
    assert block["state"] == "active_allocated"
    assert block["size"] == 3 * MiB and block["requested_size"] == 3 * MiB
    names = [(f["name"], f["filename"].rsplit("/", 1)[-1]) for f in block["frames"]]
    assert ("allocate_in_a_named_function", "test_memory_history.py") in names
    segment = next(s for s in snap["segments"] if any(b is block for b in s["blocks"]))
    assert segment["device"] == 0 and segment["segment_type"] == "large"
    assert segment["allocated_size"] == 3 * MiB and segment["total_size"] == 3 * MiB


def test_trace_records_each_action_in_order(history):
    t = allocate_in_a_named_function()
    address = t.untyped_storage().data_ptr()
    del t
    torch.rbln.empty_cache()
    trace = [e for e in torch.rbln._snapshot()["device_traces"][0] if e["addr"] == address]
    assert [e["action"] for e in trace] == ["segment_alloc", "alloc", "free_requested", "free_completed",
                                            "segment_free"]
    assert trace[1]["size"] == 3 * MiB and trace[1]["stream"] == 0
    assert any(f["name"] == "allocate_in_a_named_function" for f in trace[1]["frames"])
    assert trace[0]["time_us"] <= trace[1]["time_us"] <= trace[-1]["time_us"]


def test_free_waits_for_the_streams_that_used_the_block(history):
    side = torch.rbln.Stream()
    t = torch.empty(MiB, dtype=torch.uint8, device="rbln")
    address = t.untyped_storage().data_ptr()
    t.record_stream(side)
    del t
    torch.rbln.synchronize()
    torch.empty(1, device="rbln")  # the allocator notices finished streams when it next allocates
    actions = [e["action"] for e in torch.rbln._snapshot()["device_traces"][0] if e["addr"] == address]
    assert actions[-2:] == ["free_requested", "free_completed"]


def test_out_of_memory_is_in_the_trace(history):
    free, _ = torch.rbln.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(free + 64 * MiB, dtype=torch.uint8, device="rbln")
    oom = [e for e in torch.rbln._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert oom and oom[-1]["size"] == free + 64 * MiB and oom[-1]["device_free"] > 0
    torch.ones(4, device="rbln").cpu()  # the device stays usable


def test_memory_viz_reads_the_snapshot(history, tmp_path):
    keep = [allocate_in_a_named_function(), torch.empty(1000, device="rbln")]
    del keep[1]
    snap = torch.rbln._snapshot()
    html = _memory_viz.trace_plot(snap)
    assert "snapshot.pickle" in html and "MemoryViz" in html
    assert "snapshot.pickle" in _memory_viz.segment_plot(snap)
    summary = _memory_viz.segsum(snap)
    assert "segments" in summary.lower() or "total" in summary.lower()
    assert "allocate_in_a_named_function" in _memory_viz.memory(snap, format_flamegraph=lambda text: text)
    path = tmp_path / "snapshot.pickle"
    torch.rbln._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert set(loaded) == {"segments", "device_traces"}
    assert block_of(loaded, keep[0].untyped_storage().data_ptr())["state"] == "active_allocated"
    assert torch.rbln.memory_snapshot() == torch.rbln._snapshot()["segments"]


def test_state_only_and_max_entries():
    torch.rbln._record_memory_history(enabled="state")
    try:
        t = allocate_in_a_named_function()
        snap = torch.rbln._snapshot()
        assert all(not trace for trace in snap["device_traces"])  # no trace, only live stacks
        assert block_of(snap, t.untyped_storage().data_ptr())["frames"]
    finally:
        torch.rbln._record_memory_history(enabled=None)
    torch.rbln._record_memory_history(enabled="all", max_entries=3)
    try:
        for _ in range(5):
            torch.empty(100, device="rbln")
        assert len(torch.rbln._snapshot()["device_traces"][0]) == 3
    finally:
        torch.rbln._record_memory_history(enabled=None)
    assert all(not trace for trace in torch.rbln._snapshot()["device_traces"])  # stopping clears, as CUDA's
    t = torch.empty(100, device="rbln")
    assert block_of(torch.rbln._snapshot(), t.untyped_storage().data_ptr())["frames"] == []  # not recording


def test_bad_arguments_raise_like_cuda():
    with pytest.raises(ValueError, match="enabled"):
        torch.rbln._record_memory_history(enabled="sometimes")
    with pytest.raises(ValueError, match="stacks"):
        torch.rbln._record_memory_history(stacks="cpp")


def test_stacks_all_adds_cpp_frames():
    def frames(stacks):
        torch.rbln._record_memory_history(stacks=stacks)
        try:
            t = allocate_in_a_named_function()
            return block_of(torch.rbln._snapshot(), t.untyped_storage().data_ptr())["frames"]
        finally:
            torch.rbln._record_memory_history(enabled=None)
    python, both = frames("python"), frames("all")
    assert "allocate_in_a_named_function" in [f["name"] for f in both]  # Python's
    # and C++'s (their names depend on torch's symbolize mode, which other code may set)
    assert len(both) > len(python)
