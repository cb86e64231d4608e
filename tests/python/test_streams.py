"""torch.rbln streams and events."""
import os

import pytest
import torch


def _timed_event():
    return torch.rbln.Event(enable_timing=True)


def _generic_timed_event():
    return torch.Event(device="rbln", enable_timing=True)


def test_default_stream_is_current_at_start():
    s = torch.rbln.current_stream()
    assert s == torch.rbln.default_stream()
    assert s.stream_id == 0 and s.device == torch.device("rbln", 0)
    assert torch.rbln.default_stream(1).device_index == 1


def test_new_streams_are_distinct():
    s1, s2 = torch.rbln.Stream(), torch.rbln.Stream()
    assert s1 != s2 and s1.stream_id != 0 and s2.stream_id != 0
    assert s1.device == torch.device("rbln", 0)
    assert torch.rbln.Stream(device=1).device_index == 1


def test_stream_context_restores_previous_stream():
    outer, inner = torch.rbln.Stream(), torch.rbln.Stream()
    with torch.rbln.stream(outer):
        assert torch.rbln.current_stream() == outer
        with torch.rbln.stream(inner):
            assert torch.rbln.current_stream() == inner
        assert torch.rbln.current_stream() == outer
    assert torch.rbln.current_stream() == torch.rbln.default_stream()


def test_stream_context_on_other_device_switches_device_temporarily():
    s = torch.rbln.Stream(device=1)
    with torch.rbln.stream(s):
        assert torch.rbln.current_device() == 1
        assert torch.rbln.current_stream() == s
    assert torch.rbln.current_device() == 0
    assert torch.rbln.current_stream(1) == torch.rbln.default_stream(1)


def test_set_stream():
    s = torch.rbln.Stream()
    torch.rbln.set_stream(s)
    assert torch.rbln.current_stream() == s
    torch.rbln.set_stream(torch.rbln.default_stream())
    assert torch.rbln.current_stream() == torch.rbln.default_stream()


def test_event_ordering_across_streams(square, busy):
    side = torch.rbln.Stream()
    d = square.rbln()
    produced = torch.rbln.Event()
    a = busy(d)  # default stream
    produced.record()
    with torch.rbln.stream(side):
        side.wait_event(produced)
        b = a * 2 + 1
        consumed = torch.rbln.Event()
        consumed.record(side)
    torch.rbln.current_stream().wait_event(consumed)
    c = b - a
    torch.testing.assert_close(c.cpu(), busy(square) + 1, rtol=1e-4, atol=1e-4)


def test_wait_stream_orders_work(square, busy):
    side = torch.rbln.Stream()
    a = busy(square.rbln())
    side.wait_stream(torch.rbln.current_stream())
    with torch.rbln.stream(side):
        b = a + 1
    torch.rbln.current_stream().wait_stream(side)
    torch.testing.assert_close((b - a).cpu(), torch.ones(256, 256))
    torch.testing.assert_close(b.cpu(), busy(square) + 1, rtol=1e-4, atol=1e-4)


def test_event_orders_work_across_devices(square, busy):
    done = torch.rbln.Event()
    with torch.rbln.device(1):
        a1 = busy(square.to("rbln:1"))
        done.record()
    torch.rbln.current_stream().wait_event(done)
    torch.testing.assert_close(a1.to("rbln:0").cpu(), busy(square), rtol=1e-4, atol=1e-4)


def test_record_stream_defers_reuse_of_freed_memory(square, busy):
    """A block freed while a side stream still writes it must not be handed to new tensors."""
    side = torch.rbln.Stream()
    t = torch.zeros(1 << 20, device="rbln")
    d = square.rbln()
    side.wait_stream(torch.rbln.current_stream())
    with torch.rbln.stream(side):
        busy(d, steps=8)
        t.fill_(5.0)  # runs late, after the busy work
    t.record_stream(side)
    del t
    fresh = torch.full((1 << 20,), -1.0, device="rbln")  # same size: the freed block is the cached candidate
    torch.rbln.synchronize()
    assert torch.equal(fresh.cpu(), torch.full((1 << 20,), -1.0))


def test_event_query_and_synchronize(square, busy):
    e = torch.rbln.Event()
    assert e.query()  # never recorded
    busy(square.rbln())
    e.record()
    e.synchronize()
    assert e.query()
    assert torch.rbln.current_stream().query()


def test_stream_synchronize_and_query(square, busy):
    s = torch.rbln.Stream()
    with torch.rbln.stream(s):
        out = busy(square.rbln())
    s.synchronize()
    assert s.query()
    torch.testing.assert_close(out.cpu(), busy(square), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make_event", [_timed_event, _generic_timed_event], ids=["rbln.Event", "torch.Event"])
def test_elapsed_time_measures_real_work(make_event, square, busy):
    start, end = make_event(), make_event()
    d = square.rbln()
    start.record()
    busy(d, steps=8)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_stream_record_event_accepts_rbln_event(square, busy):
    s = torch.rbln.Stream()
    e = torch.rbln.Event()
    with torch.rbln.stream(s):
        out = busy(square.rbln())
    assert s.record_event(e) is e
    e.synchronize()
    assert e.query()
    torch.testing.assert_close(out.cpu(), busy(square), rtol=1e-4, atol=1e-4)



TEAM_STACKED = """
import os, time
cpus = sorted(os.sched_getaffinity(0))
torch.set_num_threads(2)
a = torch.randn(256, 256, device="rbln")
expected = a.cpu() @ a.cpu()
os.sched_setaffinity(0, {cpus[0]})  # a worker started now, and its OpenMP thread, start on one CPU
side = torch.rbln.Stream()
with torch.rbln.stream(side):
    got = a @ a  # the side worker's first task: its whole team, which finds itself stacked
time.sleep(0.05)  # the worker's to run, not a host waiting in synchronize
side.synchronize()
team = [int(t) for t in os.listdir("/proc/self/task") if open(f"/proc/self/task/{t}/comm").read().strip() == "rbln worker"]
masks = sorted(sorted(os.sched_getaffinity(tid)) for tid in team)
print(json.dumps({"masks": [m for m in masks if m != cpus], "cpus": cpus,
                  "close": torch.allclose(got.cpu(), expected, rtol=1e-4, atol=1e-4)}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_stacked_worker_team_is_parted(run_python):
    # The OpenMP thread that shared the side worker's CPU moved off it and is free again (the
    # process's CPUs); the worker keeps the CPU it inherited.
    out = run_python(TEAM_STACKED)
    assert out["close"] and out["masks"] == [[out["cpus"][0]]], out
    # A user who binds OpenMP threads places them: nothing moves.
    out = run_python(TEAM_STACKED, OMP_PROC_BIND="false")
    assert out["close"] and out["masks"] == [[out["cpus"][0]]] * 2, out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_torch_set_num_threads_tunes_the_host_and_leaves_the_device_as_it_is(run_python):
    # As on a GPU: vLLM sets one intra-op thread for serving, and the device's matmuls kept their whole team.
    # The worker's OpenMP pool threads carry its name ("rbln worker"): one per team thread past its own. A task
    # queued alone (not in a burst of launches) and run by the worker (the host sleeps instead of helping) takes
    # the whole team; under make test's load that may take a few tries.
    out = run_python("""
        import os, time
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        a = torch.randn(512, 512)
        x = a.rbln()
        for attempt in range(50):
            time.sleep(0.01)
            got = (x @ x)
            time.sleep(0.05)
            got = got.cpu()
            names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
            if names.count("rbln worker") >= threads:
                break
        print(json.dumps({"host": torch.get_num_threads(), "team": names.count("rbln worker"), "threads": threads,
                          "close": torch.allclose(got, a @ a, rtol=1e-4, atol=1e-4)}))
    """)
    assert out["host"] == 1 and out["close"] and out["threads"] >= 2
    assert out["team"] == out["threads"], out
