"""copy_ and .to() between cpu and rbln devices, compared with the same copy on the CPU."""
import pytest
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool]
# (source device, destination device)
PAIRS = [("cpu", "rbln:0"), ("rbln:0", "cpu"), ("rbln:0", "rbln:0"), ("rbln:0", "rbln:1"), ("rbln:1", "rbln:0")]
PAIR_IDS = [f"{s}->{d}" for s, d in PAIRS]

# Layouts of a (4, 6) tensor: (shape of the owning buffer, view of the buffer that is the (4, 6) tensor)
LAYOUTS = {
    "contiguous": ((4, 6), lambda b: b),
    "transposed": ((6, 4), lambda b: b.t()),
    "offset": ((5, 9), lambda b: b[1:, 2:8]),  # storage offset 11, row stride 9
}


def strided(layout, owner_cpu, device):
    """The (4, 6) view `layout` of owner_cpu's values, on `device`; returns (owner, view)."""
    _, view = LAYOUTS[layout]
    owner = owner_cpu.to(device, copy=True)  # never aliases owner_cpu
    return owner, view(owner)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_preserves_values(dtype, cpu_rand):
    x = cpu_rand(3, 5, dtype=dtype)
    d = x.rbln()
    assert d.dtype == dtype and d.device == torch.device("rbln", 0)
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("src_dev, dst_dev", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("src_layout", LAYOUTS)
@pytest.mark.parametrize("dst_layout", LAYOUTS)
def test_strided_copy(src_layout, dst_layout, src_dev, dst_dev, cpu_rand):
    (src_shape, src_view), (dst_shape, dst_view) = LAYOUTS[src_layout], LAYOUTS[dst_layout]
    src_owner = cpu_rand(*src_shape)
    expected = torch.zeros(dst_shape)
    dst_view(expected).copy_(src_view(src_owner))
    _, src = strided(src_layout, src_owner, src_dev)
    dst_owner, dst = strided(dst_layout, torch.zeros(dst_shape), dst_dev)
    assert dst.copy_(src) is dst
    assert dst.device == torch.device(dst_dev)
    # Compares the whole destination buffer: nothing outside the view may change.
    assert torch.equal(dst_owner.cpu(), expected)


@pytest.mark.parametrize("src_dev, dst_dev", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("src_dtype, dst_dtype", [
    (torch.float32, torch.float16), (torch.float32, torch.int32), (torch.int64, torch.float64),
    (torch.bool, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.bool),
], ids=str)
def test_dtype_converting_copy(src_dtype, dst_dtype, src_dev, dst_dev, cpu_rand):
    x = cpu_rand(4, 6, dtype=src_dtype)
    dst = torch.empty(4, 6, dtype=dst_dtype, device=dst_dev)
    dst.copy_(x.to(src_dev))
    assert torch.equal(dst.cpu(), x.to(dst_dtype))
    converted = x.to(src_dev).to(dst_dev, dst_dtype)
    assert converted.dtype == dst_dtype and converted.device == torch.device(dst_dev)
    assert torch.equal(converted.cpu(), x.to(dst_dtype))


@pytest.mark.parametrize("src_dev, dst_dev", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("src_shape", [(6,), (1, 6), (4, 1), ()], ids=str)
def test_broadcasting_copy(src_shape, src_dev, dst_dev, cpu_rand):
    x = cpu_rand(*src_shape)
    dst = torch.zeros(4, 6, device=dst_dev)
    dst.copy_(x.to(src_dev))
    assert torch.equal(dst.cpu(), x.expand(4, 6))


def test_pinned_memory_non_blocking_copies(cpu_rand):
    x = cpu_rand(256, 64)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned()
    d = pinned.to("rbln", non_blocking=True)
    back = torch.empty_like(x).pin_memory()
    back.copy_(d * 2, non_blocking=True)
    torch.rbln.synchronize()
    assert torch.equal(back, x * 2)
    assert torch.equal(d.cpu(), x)


def test_pinned_source_is_not_reused_before_its_copy_runs(cpu_rand, square, busy):
    x = cpu_rand(1 << 18)
    busy(square.rbln(), steps=8)  # delays the copy queued below
    pinned = x.pin_memory()
    d = pinned.to("rbln", non_blocking=True)
    del pinned
    other = torch.empty_like(x).pin_memory()  # same size: the freed pinned block is the candidate
    other.fill_(-1.0)
    torch.rbln.synchronize()
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("src_dev, dst_dev", [("rbln:0", "rbln:1"), ("rbln:1", "rbln:0")])
def test_cross_device_copy_waits_for_pending_work_on_both_devices(src_dev, dst_dev, cpu_rand, square, busy):
    with torch.rbln.device(torch.device(dst_dev)):
        dst = cpu_rand(256, 256).to(dst_dev)
        dst.mul_(0)  # queued on the destination device's stream, before the copy
    src = busy(square.to(src_dev), steps=6)  # still running when the copy is issued
    dst.copy_(src)
    torch.testing.assert_close(dst.cpu(), busy(square, steps=6), rtol=1e-4, atol=1e-4)


def test_non_blocking_copy_from_pageable_memory(cpu_rand):
    x = cpu_rand(64, 8)
    d = x.to("rbln", non_blocking=True)
    out = torch.empty_like(x)
    out.copy_(d, non_blocking=True)
    torch.rbln.synchronize()
    assert torch.equal(out, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int8, torch.bool], ids=str)
@pytest.mark.parametrize("device", ["rbln:0", "rbln:1"])
def test_item(dtype, device, cpu_rand):
    x = cpu_rand(4, 6, dtype=dtype)
    d = x.to(device)
    assert d[2, 3].item() == x[2, 3].item()  # a view with a storage offset
    assert d.t()[5, 1].item() == x.t()[5, 1].item()
    assert type(d[0, 0].item()) is type(x[0, 0].item())


def test_tolist_and_clone(cpu_rand):
    x = cpu_rand(3, 4)
    d = x.rbln()
    c = d.clone()
    c.add_(1)
    assert d.tolist() == x.tolist()
    assert torch.equal(c.cpu(), x + 1)
