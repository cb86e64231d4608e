"""torch.rbln against torch.cuda: every public torch.cuda name is on torch.rbln or in docs/debugging.md's
list of names left out (with the reason), and the names added for parity behave as torch.cuda's do."""
from __future__ import annotations

import importlib
import math
import re
import threading
import time
import types
import pytest
import torch

from conftest import ROOT

# torch.cuda's memory-history API is private but used; it is compared too.
PRIVATE = {"_record_memory_history", "_snapshot", "_dump_snapshot", "_memory_viz"}


def left_out() -> dict[str, str]:
    """docs/debugging.md's "Left out" table: name -> reason (a row may name several)."""
    text = (ROOT / "docs" / "debugging.md").read_text()
    section = text.split("### Left out", 1)[1].split("\n#", 1)[0]
    names = {}
    for row in re.findall(r"^\| (.+?) \| (.+?) \|$", section, re.M):
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", row[0]):
            names[name] = row[1]
    return names


def cuda_api() -> set[str]:
    """torch.cuda's public names, without what it imports from outside torch (os, typing.Any, ...)."""
    names = set()
    for name in dir(torch.cuda):
        obj = getattr(torch.cuda, name)
        if isinstance(obj, types.ModuleType):
            ours = obj.__name__.startswith("torch.cuda.")
        else:
            ours = getattr(obj, "__module__", None) is None or obj.__module__.startswith("torch")
        if ours and not name.startswith("_"):
            names.add(name)
    return names | PRIVATE


def test_every_torch_cuda_name_is_provided_or_listed_as_left_out():
    cuda = cuda_api()
    rbln = set(dir(torch.rbln))
    missing = left_out()
    assert sorted(cuda - rbln - set(missing)) == [], "on torch.cuda, not on torch.rbln, not in docs/debugging.md"
    assert sorted(set(missing) & rbln) == [], "listed as left out but provided"
    assert sorted(set(missing) - cuda) == [], "listed as left out but not on torch.cuda"
    assert PRIVATE <= rbln


@pytest.mark.parametrize("name", ["amp", "graphs", "memory", "streams", "random"])
def test_submodules_import_like_torch_cuda(name):
    module = importlib.import_module(f"torch.rbln.{name}")
    assert getattr(torch.rbln, name) is module
    cuda = importlib.import_module(f"torch.cuda.{name}")
    names = getattr(cuda, "__all__", ["Stream", "Event", "ExternalStream"])  # torch.cuda.streams has no __all__
    assert sorted(n for n in names if not hasattr(module, n) and n not in left_out()) == []
    if name != "amp":  # the others re-export torch.rbln's own functions
        assert all(getattr(module, n) is getattr(torch.rbln, n) for n in names if hasattr(module, n))


def test_memory_stats_stay_on_torch_rbln():
    assert torch.rbln.memory.memory_stats is torch.rbln.memory_stats
    d = torch.ones(1000, device="rbln")
    assert torch.rbln.memory.memory_allocated() == torch.rbln.memory_allocated() >= d.nbytes


# ---- amp -------------------------------------------------------------------------------------------
def test_amp_autocast_alias_warns_and_autocasts(cpu_rand):
    a, b = cpu_rand(4, 4).rbln(), cpu_rand(4, 4).rbln()
    with pytest.warns(FutureWarning, match=r"torch.rbln.amp.autocast\(args...\)` is deprecated"):
        ctx = torch.rbln.amp.autocast(dtype=torch.bfloat16)
    with ctx:
        out = a @ b
    assert out.dtype == torch.bfloat16 and ctx.device == "rbln"
    with torch.autocast("rbln", dtype=torch.bfloat16):
        expected = a @ b
    torch.testing.assert_close(out.cpu(), expected.cpu())


def test_amp_grad_scaler_alias_warns_and_scales():
    with pytest.warns(FutureWarning, match=r"torch.rbln.amp.GradScaler\(args...\)` is deprecated"):
        scaler = torch.rbln.amp.GradScaler(init_scale=4.0)
    assert scaler._device == "rbln"
    loss = torch.tensor(3.0, device="rbln")
    assert scaler.scale(loss).item() == 12.0


def test_amp_custom_fwd_alias_warns_and_casts():
    with pytest.warns(FutureWarning, match="custom_fwd"):
        decorate = torch.rbln.amp.custom_fwd(cast_inputs=torch.float32)

    seen = []

    class Double(torch.autograd.Function):
        @staticmethod
        @decorate
        def forward(ctx, x):
            seen.append(x.dtype)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(2, device="rbln", dtype=torch.float16)
    with torch.autocast("rbln", dtype=torch.float16):
        out = Double.apply(x)
    assert seen == [torch.float32]  # cast_inputs applied under rbln autocast
    torch.testing.assert_close(out.cpu(), torch.full((2,), 2.0))


# ---- memory ----------------------------------------------------------------------------------------
def test_nested_memory_stats_match_the_flat_ones():
    keep = torch.ones(300, device="rbln")
    flat, nested = torch.rbln.memory_stats(), torch.rbln.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] >= keep.nbytes
    assert nested["num_ooms"] == flat["num_ooms"]

    def flatten(d, prefix=""):
        for k, v in d.items():
            yield from flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else [(prefix + k, v)]

    assert dict(flatten(nested)) == flat


def test_memory_summary_has_cudas_layout():
    keep = torch.ones(1 << 20, device="rbln")  # 4 MiB, in the large pool: shown in KiB below 768 MiB, as CUDA does
    stats = torch.rbln.memory_stats()
    text = torch.rbln.memory_summary()
    lines = text.splitlines()
    assert all(len(line) == 77 and line[0] == line[-1] == "|" for line in lines)  # 75 columns between bars
    assert "PyTorch RBLN memory summary, device ID 0" in lines[1]
    assert f"RBLN OOMs: {stats['num_ooms']:<12d}" in lines[3]
    row = next(line for line in lines if line.startswith("| Allocated memory"))
    assert row.split("|")[2].strip() == f"{stats['allocated_bytes.all.current'] // 1024} KiB"
    assert any(line.startswith("|       from large pool") for line in lines)
    short = torch.rbln.memory_summary(abbreviated=True)
    assert "from large pool" not in short and "Allocated memory" in short
    del keep


def test_legacy_memory_names_warn_and_alias():
    with pytest.warns(FutureWarning, match="renamed to `torch.rbln.memory_reserved`"):
        assert torch.rbln.memory_cached() == torch.rbln.memory_reserved()
    with pytest.warns(FutureWarning, match="renamed to `torch.rbln.max_memory_reserved`"):
        assert torch.rbln.max_memory_cached() == torch.rbln.max_memory_reserved()
    big = torch.ones(1 << 20, device="rbln")
    del big
    assert torch.rbln.max_memory_allocated() >= 4 << 20
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        torch.rbln.reset_max_memory_allocated()
    assert torch.rbln.max_memory_allocated() == torch.rbln.memory_allocated()
    with pytest.warns(FutureWarning, match="reset_max_memory_cached now calls"):
        torch.rbln.reset_max_memory_cached()
    assert torch.rbln.max_memory_reserved() == torch.rbln.memory_reserved()


def test_device_memory_used_is_what_mem_get_info_does_not_call_free():
    free, total = torch.rbln.mem_get_info()
    assert torch.rbln.device_memory_used() == total - free >= torch.rbln.memory_reserved()


def test_host_memory_stats_count_pinned_blocks():
    torch.rbln.reset_peak_host_memory_stats()
    before = torch.rbln.host_memory_stats()
    pinned = torch.empty(1 << 16).pin_memory()  # 256 KiB
    during = torch.rbln.host_memory_stats()
    # handouts only grow (current may not: a block an earlier async copy held can be released at this allocation)
    assert during["active_requests.allocated"] == before["active_requests.allocated"] + 1
    assert during["active_bytes.allocated"] - before["active_bytes.allocated"] >= pinned.nbytes
    assert during["active_requests.current"] >= 1
    assert torch.rbln.host_memory_stats_as_nested_dict()["active_requests"]["current"] == during[
        "active_requests.current"]
    del pinned
    torch.rbln.reset_accumulated_host_memory_stats()
    after = torch.rbln.host_memory_stats()
    assert after["active_requests.allocated"] == 0 and after["active_bytes.allocated"] == 0


@pytest.fixture
def fraction():
    yield torch.rbln.set_per_process_memory_fraction
    torch.rbln.set_per_process_memory_fraction(1.0)
    torch.rbln.empty_cache()


def test_memory_fraction_caps_reservations(fraction, assert_device_works):
    assert torch.rbln.get_per_process_memory_fraction() == 1.0
    total = torch.rbln.get_device_properties(0).total_memory
    fraction(1 / 64)  # 128 MiB of 8 GiB
    assert torch.rbln.get_per_process_memory_fraction() == 1 / 64
    ooms = torch.rbln.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match="per-process memory fraction"):
        torch.empty(total // 32, dtype=torch.uint8, device="rbln")
    assert torch.rbln.memory_stats()["num_ooms"] == ooms + 1
    small = torch.ones(1 << 20, device="rbln")  # still fits
    assert small.sum().item() == 1 << 20
    assert torch.rbln.get_per_process_memory_fraction(1) == 1.0  # per device
    torch.empty(total // 32, dtype=torch.uint8, device="rbln:1")
    assert_device_works()


def test_memory_fraction_argument_checks_match_cuda(fraction):
    with pytest.raises(TypeError, match="Invalid type for fraction argument, must be `float`"):
        fraction(1)
    with pytest.raises(ValueError, match=r"Invalid fraction value: 1.5. Allowed range: 0~1"):
        fraction(1.5)


def test_caching_allocator_alloc_and_delete():
    before = torch.rbln.memory_allocated()
    ptr = torch.rbln.caching_allocator_alloc(4096)
    assert isinstance(ptr, int) and ptr != 0
    assert torch.rbln.memory_allocated() == before + 4096
    torch.rbln.caching_allocator_delete(ptr)
    assert torch.rbln.memory_allocated() == before
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        torch.rbln.caching_allocator_delete(ptr)
    s = torch.rbln.Stream(device=1)
    ptr = torch.rbln.caching_allocator_alloc(512, device=1, stream=s)
    assert torch.rbln.memory_allocated(1) >= 512
    torch.rbln.caching_allocator_delete(ptr)
    with pytest.raises(TypeError, match="Invalid type for stream argument"):
        torch.rbln.caching_allocator_alloc(512, stream=7)


def test_allocator_backend_and_oom_error():
    assert torch.rbln.get_allocator_backend() == "native"
    assert torch.rbln.OutOfMemoryError is torch.OutOfMemoryError


# ---- devices, generators, tensor types ------------------------------------------------------------
def test_peer_access():
    assert torch.rbln.can_device_access_peer(0, 1) and torch.rbln.can_device_access_peer("rbln:1", 0)
    assert not torch.rbln.can_device_access_peer(0, 0)
    with pytest.raises(AssertionError, match="Invalid peer device id"):
        torch.rbln.can_device_access_peer(0, 9)
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.rbln.can_device_access_peer(9, 0)


def test_default_generators_are_the_devices_generators():
    gens = torch.rbln.default_generators
    assert len(gens) == torch.rbln.device_count()
    assert all(isinstance(g, torch.Generator) and g.device == torch.device("rbln", i) for i, g in enumerate(gens))
    gens[1].manual_seed(77)
    with torch.rbln.device(1):
        assert torch.rbln.initial_seed() == 77
        a = torch.rand(5, device="rbln:1")
    gens[1].manual_seed(77)
    torch.testing.assert_close(torch.rand(5, device="rbln:1").cpu(), a.cpu())


def test_capabilities():
    assert torch.rbln.is_tf32_supported() is False
    assert torch.rbln.has_half is True


@pytest.mark.parametrize("name, dtype", [("FloatTensor", torch.float32), ("LongTensor", torch.int64),
                                         ("BFloat16Tensor", torch.bfloat16), ("BoolTensor", torch.bool),
                                         ("ByteTensor", torch.uint8), ("HalfTensor", torch.float16)])
def test_legacy_tensor_types(name, dtype):
    cls = getattr(torch.rbln, name)
    with torch.rbln.device(1):
        empty = cls(2, 3)
    assert empty.shape == (2, 3) and empty.dtype == dtype and empty.device == torch.device("rbln", 1)
    data = cls([1, 0, 1])
    torch.testing.assert_close(data.cpu(), torch.tensor([1, 0, 1], dtype=dtype))
    assert cls().shape == (0,) and cls(torch.Size([4])).shape == (4,)
    assert isinstance(data, cls) and isinstance(data, torch.Tensor)
    assert not isinstance(data.cpu(), cls)
    other = torch.rbln.DoubleTensor if dtype != torch.float64 else torch.rbln.FloatTensor
    assert not isinstance(data, other)


# ---- external streams ------------------------------------------------------------------------------
def test_external_stream_wraps_a_handle(cpu_rand):
    side = torch.rbln.Stream(device="rbln:1")
    external = torch.rbln.ExternalStream(side.rbln_stream)
    assert external == side and external.device_index == 1 and isinstance(external, torch.rbln.streams.Stream)
    assert torch.rbln.get_stream_from_external(side.rbln_stream) == side
    x = cpu_rand(1 << 16)
    d = x.to("rbln:1")
    side.wait_stream(torch.rbln.current_stream(1))
    with torch.rbln.stream(external):  # queued on the same stream as `side`
        y = d * 2
    side.synchronize()
    torch.testing.assert_close(y.cpu(), x * 2)
    assert torch.rbln.default_stream(0).rbln_stream != torch.rbln.default_stream(1).rbln_stream


def test_external_stream_rejects_what_is_no_stream():
    with pytest.raises(RuntimeError, match="not an rbln stream handle"):
        torch.rbln.ExternalStream(12345)
    with pytest.raises(ValueError, match="rbln:1"):
        torch.rbln.ExternalStream(torch.rbln.Stream(device="rbln:1").rbln_stream, device="rbln:0")


# ---- caching switched off ----------------------------------------------------------------------------
def test_caching_allocator_disabled_returns_memory_at_once():
    torch.rbln.synchronize()
    torch.rbln.empty_cache()
    base = torch.rbln.memory_reserved()
    n = 1 << 20  # 4 MiB of float32
    with torch.rbln.memory.caching_allocator_disabled():
        t = torch.ones(n, device="rbln")
        assert torch.rbln.memory_reserved() - base == 4 * n
        assert (t * 2).sum().item() == 2 * n  # the temporaries go back too
        del t
        assert torch.rbln.memory_reserved() == base
    t = torch.ones(n, device="rbln")
    del t
    assert torch.rbln.memory_reserved() - base == 4 * n  # caching again
    torch.rbln.empty_cache()


# ---- memory pools ------------------------------------------------------------------------------------
def test_mem_pool_keeps_its_blocks_apart():
    torch.rbln.synchronize()
    torch.rbln.empty_cache()
    base = torch.rbln.memory_reserved()
    pool = torch.rbln.MemPool()
    n = 1 << 18  # 1 MiB of float32
    with torch.rbln.use_mem_pool(pool):
        assert pool.use_count() == 2
        a = torch.ones(n, device="rbln")
    address = a.untyped_storage().data_ptr()
    assert [s["address"] for s in pool.snapshot()] == [address] and pool.snapshot()[0]["segment_pool_id"] == pool.id
    del a
    b = torch.ones(n, device="rbln")  # outside the pool: not the pool's freed block
    assert b.untyped_storage().data_ptr() != address
    with torch.rbln.use_mem_pool(pool):
        c = torch.full((n,), 3.0, device="rbln")  # inside: the pool's block again
    assert c.untyped_storage().data_ptr() == address
    assert c.sum().item() == 3 * n
    del pool  # c outlives the pool: still valid, and its memory goes back when it is freed
    assert c.sum().item() == 3 * n
    del b, c
    torch.rbln.synchronize()
    torch.empty(1, device="rbln")  # a stream-ordered release settles at the next allocation
    torch.rbln.empty_cache()
    assert torch.rbln.memory_reserved() == base


def test_mem_pool_rejects_what_rbln_lacks():
    with pytest.raises(ValueError, match="allocator must be None"):
        torch.rbln.MemPool(allocator=object())
    with pytest.raises(NotImplementedError):
        torch.rbln.MemPool(use_on_oom=True)


# ---- legacy typed storages ---------------------------------------------------------------------------
STORAGES = {"FloatStorage": [1.5, -2.25, 3.0], "DoubleStorage": [1.5, -2.25, 1e300], "HalfStorage": [1.5, -2.25, 3.0],
            "BFloat16Storage": [1.5, -2.25, 3.0], "BoolStorage": [True, False, True], "ByteStorage": [1, 0, 255],
            "CharStorage": [1, 0, -128], "ShortStorage": [1, 0, -300], "IntStorage": [1, 0, -(2 ** 31)],
            "LongStorage": [1, 0, 2 ** 40], "ComplexFloatStorage": [1 + 2j, -3j, 0.5],
            "ComplexDoubleStorage": [1 + 2j, -3j, 1e300]}


@pytest.fixture
def quiet_typed_storage():
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
        yield


@pytest.mark.parametrize("name", STORAGES)
def test_legacy_storages_are_made_on_rbln_as_torch_cuda_s_on_cuda(name, quiet_typed_storage):
    cls, cpu_cls = getattr(torch.rbln, name), getattr(torch, name)
    assert issubclass(cls, torch.storage._LegacyStorage) and cls.__module__ == "torch.rbln"
    assert cls.dtype == cpu_cls.dtype == getattr(torch.cuda, name).dtype
    data = STORAGES[name]
    s, expected = cls(data), cpu_cls(data)
    assert s.device == torch.device("rbln", 0) and s.dtype == cls.dtype and s.size() == len(data)
    assert s.tolist() == expected.tolist()
    assert s.cpu().tolist() == expected.tolist() and s.cpu().device.type == "cpu"
    assert expected.rbln().tolist() == expected.tolist() and expected.rbln().device.type == "rbln"
    assert s.type() == f"torch.rbln.{name}" and expected.type() == f"torch.{name}"
    assert isinstance(s, cls) and not isinstance(s.cpu(), cls) and not isinstance(s, cpu_cls)
    other = torch.rbln.DoubleStorage if name != "DoubleStorage" else torch.rbln.FloatStorage
    assert not isinstance(s, other)
    with torch.rbln.device(1):
        empty = cls(4)
    assert empty.device == torch.device("rbln", 1) and empty.size() == 4 and cls().size() == 0


def test_legacy_storages_round_trip_through_tensors_and_torch_save(quiet_typed_storage, tmp_path):
    s = torch.rbln.FloatStorage([1.0, 2.0, 3.5])
    t = torch.tensor([], device="rbln").set_(s)
    torch.testing.assert_close(t.cpu(), torch.tensor([1.0, 2.0, 3.5]))
    t.mul_(2)  # the tensor and the storage share memory
    assert s.tolist() == [2.0, 4.0, 7.0]
    assert isinstance(t.storage(), torch.rbln.FloatStorage) and t.storage().type() == "torch.rbln.FloatStorage"
    s.copy_(torch.FloatStorage([9.0, 8.0, 7.0]))
    assert s.tolist() == [9.0, 8.0, 7.0] and s.clone().device.type == "rbln"
    torch.save(s, tmp_path / "s.pt")
    for weights_only in (False, True):
        loaded = torch.load(tmp_path / "s.pt", weights_only=weights_only)
        assert loaded.device == torch.device("rbln", 0) and loaded.tolist() == [9.0, 8.0, 7.0]
    wrapped = torch.rbln.IntStorage(wrap_storage=torch.UntypedStorage(8, device="rbln:1"))
    assert wrapped.size() == 2 and wrapped.device == torch.device("rbln", 1)


def test_legacy_storages_refuse_what_torch_cuda_s_refuse(quiet_typed_storage):
    with pytest.raises(RuntimeError, match="Device of 'wrap_storage' must be rbln, but got cpu"):
        torch.rbln.FloatStorage(wrap_storage=torch.UntypedStorage(8))
    with pytest.raises(RuntimeError, match="from_buffer: Not available for RBLN storage"):
        torch.rbln.FloatStorage.from_buffer(b"abcd")
    with pytest.raises(RuntimeError, match="Keyword argument 'device' cannot be specified"):
        torch.rbln.FloatStorage(4, device="cpu")


# ---- errors, device health ------------------------------------------------------------------------------
def test_accelerator_error_is_torch_cuda_s():
    assert torch.rbln.AcceleratorError is torch.cuda.AcceleratorError is torch.AcceleratorError
    assert issubclass(torch.rbln.AcceleratorError, RuntimeError)



HEALTH = ["clock_rate", "power_draw", "temperature", "utilization", "memory_usage"]


@pytest.mark.parametrize("name", HEALTH)
def test_health_calls_take_torch_cuda_s_arguments(name):
    import inspect

    def parameters(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert parameters(getattr(torch.rbln, name)) == parameters(getattr(torch.cuda, name)) == [
        ("device", inspect.Parameter.POSITIONAL_OR_KEYWORD, None)]
    fn = getattr(torch.rbln, name)
    assert fn() == fn(0) == fn("rbln:0") == fn(torch.device("rbln", 0))
    assert isinstance(fn(1), int)
    with pytest.raises(ValueError, match="Invalid device index rbln:9"):
        fn(9)
    with pytest.raises(ValueError, match="Expected an rbln device"):
        fn("cpu")


@pytest.mark.parametrize("name", ["clock_rate", "power_draw", "temperature"])
def test_sensor_readings_are_the_emulated_devices_none(name):
    # No clock, power or thermal sensor on the emulated device: 0, as torch.cuda answers an amdsmi "N/A".
    assert [getattr(torch.rbln, name)(i) for i in range(torch.rbln.device_count())] == [0] * torch.rbln.device_count()


def test_memory_usage_is_the_percent_of_capacity_in_use():
    torch.rbln.synchronize(1)
    torch.rbln.empty_cache()
    total = torch.rbln.get_device_properties(1).total_memory
    before = torch.rbln.memory_usage(1)
    block = torch.empty(1 << 30, dtype=torch.uint8, device="rbln:1")  # reserved, never touched
    assert torch.rbln.memory_usage(1) == round(100 * torch.rbln.device_memory_used(1) / total)
    assert abs(torch.rbln.memory_usage(1) - before - 100 * (1 << 30) / total) <= 1
    assert torch.rbln.memory_usage(0) == round(100 * torch.rbln.device_memory_used(0) / total)
    del block
    torch.rbln.empty_cache()
    assert torch.rbln.memory_usage(1) == before


def queue_work(x, seconds):
    """Queues about `seconds` of tanh(x @ x) on x's current stream, timed on this machine first."""
    start = time.perf_counter()
    for _ in range(3):
        x = torch.tanh(x @ x)
    torch.rbln.current_stream(x.device).synchronize()
    for _ in range(math.ceil(3 * seconds / (time.perf_counter() - start))):
        x = torch.tanh(x @ x)
    return x


def test_utilization_is_the_busy_fraction_of_the_last_second(cpu_rand):
    torch.rbln.utilization(1)  # starts the sampler (a first call waits for its first samples)
    d = cpu_rand(1024, 1024).to("rbln:1")
    stream = torch.rbln.Stream(device=1)  # a stream made after the sampler started counts too
    stream.wait_stream(torch.rbln.current_stream(1))
    with torch.rbln.stream(stream):
        d = queue_work(d, seconds=1.5)
    time.sleep(0.7)  # the host waits, the device works: at least 70% of the window
    assert not stream.query(), "the queued work finished early: too little of it to measure"
    during, other = torch.rbln.utilization(1), torch.rbln.utilization(0)
    stream.synchronize()
    time.sleep(1.05)  # a whole window with no work
    assert during >= 50 and other < during, (during, other)  # rbln:0 ran no more than an earlier test's tail
    assert torch.rbln.utilization(1) == torch.rbln.utilization(0) == 0


def test_list_gpu_processes_names_this_process_once_it_holds_device_memory():
    import os

    torch.rbln.synchronize(1)
    torch.rbln.empty_cache()
    idle = torch.rbln.list_gpu_processes(1)
    block = torch.empty(3 << 20, dtype=torch.uint8, device="rbln:1")
    lines = torch.rbln.list_gpu_processes("rbln:1").splitlines()
    assert lines[0] == "RBLN:1" and len(lines) == 2
    used = torch.rbln.device_memory_used(1) / (1024 * 1024)
    assert lines[1] == f"process {os.getpid():>10d} uses {used:>12.3f} MB GPU memory"  # torch.cuda's layout
    del block
    torch.rbln.empty_cache()
    if torch.rbln.device_memory_used(1) == 0:
        assert idle == torch.rbln.list_gpu_processes(1) == "RBLN:1\nno processes are running"


def test_synchronize_releases_the_gil_while_it_waits():
    x = queue_work(torch.randn(512, 512, device="rbln"), seconds=1)
    entering, waited = threading.Event(), []

    def wait():
        entering.set()
        start = time.perf_counter()
        torch.rbln.synchronize()
        waited.append(time.perf_counter() - start)

    thread, ticks = threading.Thread(target=wait), 0
    thread.start()
    entering.wait()
    while thread.is_alive():
        ticks += 1  # runs only if the waiting thread let go of the GIL
    thread.join()
    assert waited[0] > 0.1, waited  # the work was still queued when it began to wait
    assert ticks > 10_000, (ticks, waited)
