"""The caching device allocator's accounting, and out-of-memory behaviour."""
import gc
import re

import pytest
import torch

MiB = 1 << 20


@pytest.fixture
def clean_cache():
    """An empty cache, so new allocations reserve fresh blocks; returns the baseline."""
    torch.rbln.synchronize()
    torch.rbln.empty_cache()
    return {"allocated": torch.rbln.memory_allocated(), "reserved": torch.rbln.memory_reserved(),
            "free": torch.rbln.mem_get_info()[0]}


# requested bytes -> bytes the allocator accounts (512 B granules below 1 MiB, 1 MiB granules above)
SIZES = [(1, 512), (4000, 4096), (512 * 1024, 512 * 1024), (3 * MiB + 5, 4 * MiB)]


@pytest.mark.parametrize("nbytes, rounded", SIZES, ids=[str(n) for n, _ in SIZES])
def test_allocation_accounting(nbytes, rounded, clean_cache):
    # Free space that empty_cache() keeps (inside segments holding tensors that earlier tests of this process still
    # hold) may serve a small block without reserving more.
    cached = clean_cache["reserved"] - clean_cache["allocated"]
    t = torch.empty(nbytes, dtype=torch.uint8, device="rbln")
    assert torch.rbln.memory_allocated() - clean_cache["allocated"] == rounded
    grown = torch.rbln.memory_reserved() - clean_cache["reserved"]
    assert grown == rounded or (grown == 0 and cached >= rounded), (grown, cached)
    assert clean_cache["free"] - torch.rbln.mem_get_info()[0] == grown
    del t
    assert torch.rbln.memory_allocated() == clean_cache["allocated"]
    assert torch.rbln.memory_reserved() - clean_cache["reserved"] == grown  # cached
    torch.rbln.empty_cache()
    assert torch.rbln.memory_reserved() == clean_cache["reserved"]
    assert torch.rbln.mem_get_info()[0] == clean_cache["free"]


def test_cached_block_is_reused(clean_cache):
    t = torch.empty(2 * MiB, dtype=torch.uint8, device="rbln")
    del t
    reserved = torch.rbln.memory_reserved()
    t = torch.empty(2 * MiB, dtype=torch.uint8, device="rbln")
    assert torch.rbln.memory_reserved() == reserved
    assert torch.rbln.memory_allocated() - clean_cache["allocated"] == 2 * MiB


@pytest.mark.parametrize("unit", [MiB, 4096], ids=["large", "small"])
def test_cached_block_splits_and_merges(unit, clean_cache):
    big = torch.empty(8 * unit, dtype=torch.uint8, device="rbln")
    del big
    reserved = torch.rbln.memory_reserved()
    parts = [torch.empty(n * unit, dtype=torch.uint8, device="rbln") for n in (3, 2, 3)]  # pieces of the 8-unit block
    assert torch.rbln.memory_reserved() == reserved
    assert torch.rbln.memory_allocated() - clean_cache["allocated"] == 8 * unit
    parts[1].fill_(7)
    assert int(parts[1].sum()) == 7 * 2 * unit
    del parts  # the pieces merge back into one segment, which empty_cache returns
    assert torch.rbln.memory_allocated() == clean_cache["allocated"]
    torch.rbln.empty_cache()
    assert torch.rbln.memory_reserved() == clean_cache["reserved"]


def test_a_miss_returns_the_streams_free_segments_first(clean_cache):
    """Shifting sizes reuse freed memory: a request no cached block fits hands the stream's free
    segments back to the driver (which merges neighbours) before reserving, so reserved stays at what is live."""
    parts = [torch.empty(n * MiB, dtype=torch.uint8, device="rbln") for n in (2, 3)]
    del parts
    assert torch.rbln.memory_reserved() - clean_cache["reserved"] == 5 * MiB  # cached
    t = torch.full((5 * MiB + 1,), 7, dtype=torch.uint8, device="rbln")  # 6 MiB: fits no cached block
    assert torch.rbln.memory_reserved() - clean_cache["reserved"] == 6 * MiB
    assert torch.rbln.memory_allocated() - clean_cache["allocated"] == 6 * MiB
    assert int(t[::MiB].sum()) == 7 * 6


def test_memory_released_on_a_miss_waits_for_its_streams_work(square, busy, clean_cache):
    """A segment released without a sync (its stream's queued work may still read it) is only
    written by another stream's new tensor after that work: the side stream waits on a fence."""
    side = torch.rbln.Stream()
    src = torch.full((1 << 20,), 2.0, device="rbln")
    a = busy(square.rbln(), steps=8)  # queued work ahead of the read below
    total = (src + a.sum() * 0).sum()  # reads src once the busy work is done
    del src  # cached on the default stream
    other = torch.empty(3 << 20, device="rbln")  # a miss on the default stream: src's segment goes back
    with torch.rbln.stream(side):
        fresh = torch.full((1 << 20,), -1.0, device="rbln")  # may land on src's memory
    torch.rbln.synchronize()
    assert total.item() == 2.0 * (1 << 20)
    assert torch.equal(fresh.cpu(), torch.full((1 << 20,), -1.0))
    del other


def test_peaks_and_reset(clean_cache):
    torch.rbln.reset_peak_memory_stats()
    assert torch.rbln.max_memory_allocated() == torch.rbln.memory_allocated()
    assert torch.rbln.max_memory_reserved() == torch.rbln.memory_reserved()
    t = torch.empty(5 * MiB, dtype=torch.uint8, device="rbln")
    del t
    assert torch.rbln.max_memory_allocated() == clean_cache["allocated"] + 5 * MiB
    assert torch.rbln.max_memory_reserved() == clean_cache["reserved"] + 5 * MiB
    torch.rbln.empty_cache()
    torch.rbln.reset_peak_memory_stats()
    assert torch.rbln.max_memory_allocated() == torch.rbln.memory_allocated() == clean_cache["allocated"]
    assert torch.rbln.max_memory_reserved() == torch.rbln.memory_reserved() == clean_cache["reserved"]


def test_memory_stats_agree_with_getters(clean_cache):
    before = torch.rbln.memory_stats()
    t = torch.empty(3000, device="rbln")  # 12000 B requested, 12288 B allocated
    stats = torch.rbln.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.rbln.memory_allocated() == clean_cache["allocated"] + 12288
    assert stats["reserved_bytes.all.current"] == torch.rbln.memory_reserved()
    assert stats["allocated_bytes.all.peak"] == torch.rbln.max_memory_allocated()
    assert stats["requested_bytes.all.current"] - before["requested_bytes.all.current"] == t.nbytes == 12000
    assert stats["allocation.all.current"] - before["allocation.all.current"] == 1


def test_devices_are_accounted_separately():
    torch.rbln.synchronize(1)
    base0, base1 = torch.rbln.memory_allocated(0), torch.rbln.memory_allocated(1)
    t = torch.empty(1024, dtype=torch.uint8, device="rbln:1")
    assert torch.rbln.memory_allocated(1) - base1 == 1024
    assert torch.rbln.memory_allocated("rbln:1") == torch.rbln.memory_allocated(1)
    assert torch.rbln.memory_allocated(0) == base0
    del t
    assert torch.rbln.memory_allocated(1) == base1


@pytest.mark.parametrize("index", [0, 1])
def test_out_of_memory_raises_and_recovers(index, assert_device_works):
    gc.collect()  # tensors of earlier tests in reference cycles must not be freed mid-test
    torch.rbln.synchronize(index)
    allocated = torch.rbln.memory_allocated(index)
    capacity = torch.rbln.get_device_properties(index).total_memory
    ooms = torch.rbln.memory_stats(index)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(capacity + (1 << 30), dtype=torch.uint8, device=f"rbln:{index}")
    message = str(info.value)
    assert f"rbln:{index}" in message
    assert re.search(r"Tried to allocate \d+\.\d\d GiB", message), message
    assert torch.rbln.memory_stats(index)["num_ooms"] == ooms + 1
    assert torch.rbln.memory_allocated(index) == allocated
    assert_device_works(f"rbln:{index}")


def test_filling_device_memory(run_python):
    """A 64 MiB device really filled with written tensors, then freed, then refilled through the cache."""
    out = run_python(
        """
        import re
        MiB = 1 << 20
        base = torch.rbln.memory_allocated()
        held, error = [], None
        try:
            while True:
                held.append(torch.ones(8 * MiB, dtype=torch.uint8, device="rbln"))
        except torch.OutOfMemoryError as e:
            error = str(e)
        filled = len(held)
        sums = [int(t.cpu().sum(dtype=torch.int64)) for t in held]  # .cpu() needs no device memory
        del held
        after_free = torch.rbln.memory_allocated()
        # The freed blocks are cached; a bigger request must return them to the driver and succeed.
        big = torch.full((48 * MiB,), 3, dtype=torch.uint8, device="rbln")
        big_ok = int(big[::MiB].sum().item()) == 3 * 48
        del big
        x = torch.arange(10.0, device="rbln")
        print(json.dumps({"base": base, "filled": filled, "sums": sorted(set(sums)), "error": error,
                          "after_free": after_free, "big_ok": big_ok,
                          "works": (x * 2).cpu().tolist() == [2.0 * i for i in range(10)]}))
        """,
        RBLN_DEVICE_MEMORY="64M")
    assert out["filled"] == 8  # nothing but our tensors: all 64 MiB handed out
    assert out["sums"] == [8 << 20]
    assert "rbln:0" in out["error"] and "Tried to allocate 8.00 MiB" in out["error"]
    assert out["after_free"] == out["base"]
    assert out["big_ok"] and out["works"]


def test_strict_mode_keeps_results_correct(run_python):
    """RBLN_STRICT=1 makes device memory inaccessible outside launches and copies; results must not change."""
    out = run_python(
        """
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(64, 48, generator=g), torch.randn(48, 32, generator=g)
        d = a.rbln()
        pinned = torch.empty(64, 48).pin_memory()
        pinned.copy_(d, non_blocking=True)
        torch.rbln.synchronize()
        checks = {
            "strict": torch_rbln._C._strict_mode(),
            "round_trip": d.cpu().equal(a),
            "pinned": pinned.equal(a),
            "strided": d.t()[::2].cpu().equal(a.t()[::2]),
            "cross_device": d.to("rbln:1").cpu().equal(a),
            "mm": torch.allclose((d @ b.rbln()).cpu(), a @ b, atol=1e-4),
            "elementwise": torch.allclose((d.exp() * 2 - d).cpu(), a.exp() * 2 - a),
            "item": d[3, 7].item() == a[3, 7].item(),
            "fallback": torch.hash_tensor(d, dim=1).cpu().equal(torch.hash_tensor(a, dim=1)),
            "offset_write": torch.zeros(8, 8, device="rbln")[2:, 3:].copy_(a[:6, :5]).cpu().equal(a[:6, :5]),
        }
        print(json.dumps(checks))
        """,
        RBLN_STRICT="1")
    assert out == dict.fromkeys(out, True) and len(out) == 10
