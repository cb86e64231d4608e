"""The low-precision dtypes on the device: float8 (and float4_e2m1fn_x2 as storage) are created, copied, cast,
viewed, selected, compared, multiplied, matrix-multiplied and abs'd on rbln bit for bit as on CPU, with no CPU
fallback."""
import io

import pytest
import torch

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu]
FLOATING = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    return t.cpu().view(BITS[t.element_size()])


def values(dtype):
    """Ordinary values of several magnitudes, and what float8 cannot hold: out of range (saturating or
    becoming inf or NaN as CPU's conversion does), infinities, NaN, signed zeros, subnormals, ties."""
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 448.0, 449.0, 464.0, 480.0, 57344.0, 61440.0, 1e6, -1e6, 1e30,
                            -1e30, 1e-3, 2.0 ** -9, 2.0 ** -10, 2.0 ** -17, 1e-30, 2.0 ** -127, 2.0 ** 127,
                            float("inf"), float("-inf"), float("nan"), 0.5 + 2.0 ** -5, 1.0 + 2.0 ** -4, 3.0 * 2.0 ** -4])
    x = torch.cat([special, torch.randn(997, generator=g) * 10.0 ** torch.randint(-8, 8, (997,), generator=g)])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("source", FLOATING, ids=str)
def test_casts_to_and_from_float8_are_cpus_bit_for_bit(dtype, source):
    x = values(source)
    every = torch.arange(256, dtype=torch.uint8).view(dtype)  # every float8 bit pattern, NaNs included
    with torch.rbln.explain() as ex:
        down = x.rbln().to(dtype)
        strided = x.rbln()[::3].to(dtype)  # the strided loop, not only the dense one
        up = every.rbln().to(source)
        into = torch.empty(256, dtype=source, device="rbln").copy_(every.rbln())
    assert down.dtype == dtype and down.device.type == "rbln"
    assert torch.equal(bits(down), bits(x.to(dtype)))
    assert torch.equal(bits(strided), bits(x[::3].to(dtype)))
    assert torch.equal(bits(up), bits(every.to(source))) and torch.equal(bits(into), bits(up))
    assert not ex.fallback_ops


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_copies_between_devices_layouts_and_float8_dtypes(dtype):
    x = values(torch.float32)[:600].view(20, 30).to(dtype)
    with torch.rbln.explain() as ex:
        d = x.to("rbln")
        t = d.t().contiguous()  # a transposed copy
        s = torch.empty(30, 20, dtype=dtype, device="rbln").t().copy_(d)  # into a strided destination
        other = [d.to(o) for o in FLOAT8 if o != dtype]  # float8 to float8, through float as CPU
        n = d.to("rbln", non_blocking=True)
    assert torch.equal(bits(d), bits(x)) and torch.equal(bits(t), bits(x.t().contiguous()))
    assert torch.equal(bits(s), bits(x)) and torch.equal(bits(n), bits(x))
    assert all(torch.equal(bits(o), bits(x.to(o.dtype))) for o in other)
    assert not ex.fallback_ops


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_creation_and_fills_as_cpus(dtype):
    with torch.rbln.explain() as ex:
        made = [torch.empty(3, dtype=dtype, device="rbln").zero_(), torch.zeros(2, 3, dtype=dtype, device="rbln"),
                torch.ones(4, dtype=dtype, device="rbln"), torch.full((2, 2), 2.0, dtype=dtype, device="rbln"),
                torch.zeros(2, 6, dtype=dtype, device="rbln")[:, ::2].fill_(0.75),  # a strided fill
                torch.zeros(3, dtype=dtype, device="rbln").fill_(torch.tensor(0.3))]
    expected = [torch.zeros(3, dtype=dtype), torch.zeros(2, 3, dtype=dtype), torch.ones(4, dtype=dtype),
                torch.full((2, 2), 2.0, dtype=dtype), torch.zeros(2, 6, dtype=dtype)[:, ::2].fill_(0.75),
                torch.zeros(3, dtype=dtype).fill_(torch.tensor(0.3))]
    for m, e in zip(made, expected):
        assert m.dtype == dtype and torch.equal(bits(m), bits(e))
    assert not ex.fallback_ops


@pytest.mark.parametrize("dtype", FLOAT8[:4] + [torch.float16, torch.int8], ids=str)
def test_fill_out_of_range_raises_cpus_error_and_the_device_stays_usable(dtype):
    with pytest.raises(RuntimeError) as cpu:
        torch.full((2,), 1e6, dtype=dtype)
    with pytest.raises(RuntimeError) as rbln:
        torch.full((2,), 1e6, dtype=dtype, device="rbln")
    assert str(rbln.value) == str(cpu.value)
    assert torch.equal(bits(torch.ones(2, dtype=dtype, device="rbln")), bits(torch.ones(2, dtype=dtype)))


def setitem(a, index, mask):
    out = a.clone()
    out[:, index] = a[:, :1]
    return out


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_views_selections_and_layout_ops_on_the_device(dtype):
    x = values(torch.float32)[:24].view(4, 6).nan_to_num(0.0).clamp(-100, 100).to(dtype)
    index = torch.tensor([2, 0, 3])
    mask = x.float() > 0
    ops = {
        "view": lambda a, i, m: a.view(torch.uint8),
        "slice": lambda a, i, m: a[1:, ::2].contiguous(),
        "cat": lambda a, i, m: torch.cat([a, a[:2]]),
        "stack": lambda a, i, m: torch.stack([a, a], 1),
        "index": lambda a, i, m: a[i],
        "index_select": lambda a, i, m: a.index_select(1, i),
        "mask": lambda a, i, m: a[m],
        "masked_select": lambda a, i, m: a.masked_select(m),
        "where": lambda a, i, m: torch.where(m, a, a.flip(0)),
        "flip": lambda a, i, m: a.flip(0),
        "roll": lambda a, i, m: a.roll(2, 1),
        "narrow_copy": lambda a, i, m: a.narrow_copy(1, 1, 3),
        "repeat": lambda a, i, m: a.repeat(2, 1),
        "eq": lambda a, i, m: a == a.flip(0),
        "ne": lambda a, i, m: a != a[0],
        "isnan": lambda a, i, m: a.isnan(),
        "any": lambda a, i, m: (a.any(), a.any(1)),
        "all": lambda a, i, m: (a.all(), a.all(0)),
    }
    if dtype != torch.float8_e8m0fnu:  # CPU's index_put has no float8_e8m0fnu
        ops["index_put"] = lambda a, i, m: a.clone().index_put_((i,), a[0])
        ops["setitem"] = setitem
    for name, op in ops.items():
        expected = op(x, index, mask)
        with torch.rbln.explain() as ex:
            actual = op(x.rbln(), index.rbln(), mask.rbln())
        pairs = zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]
        for a, e in pairs:
            assert a.device.type == "rbln" and a.dtype == e.dtype and torch.equal(bits(a), bits(e)), name
        assert not ex.fallback_ops, (name, ex.fallback_ops)
    with torch.rbln.explain() as ex:  # CPU flips float8 along the first dim only; rbln (as CUDA) along any
        flipped = x.rbln().flip(1)
    assert torch.equal(bits(flipped), x.view(torch.uint8).flip(1)) and not ex.fallback_ops


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_save_and_load_keep_float8_bits(dtype):
    x = values(torch.float32)[:50].to(dtype).rbln()
    buffer = io.BytesIO()
    torch.save({"w": x}, buffer)
    buffer.seek(0)
    y = torch.load(buffer)["w"]
    assert y.device.type == "rbln" and torch.equal(bits(y), bits(x))
    buffer.seek(0)
    assert torch.equal(bits(torch.load(buffer, map_location="cpu")["w"]), bits(x))


def test_float4_e2m1fn_x2_is_storage_on_the_device():
    """Two float4 values a byte: copies, views and save/load keep the bytes; CPU casts none (nor does rbln)."""
    packed = torch.arange(256, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).view(16, 16)
    with torch.rbln.explain() as ex:
        d = packed.rbln()
        t = d.t().contiguous()
        c = d.clone()
    assert d.dtype == torch.float4_e2m1fn_x2
    assert torch.equal(d.cpu().view(torch.uint8), packed.view(torch.uint8))
    assert torch.equal(t.cpu().view(torch.uint8), packed.t().contiguous().view(torch.uint8))
    assert torch.equal(c.view(torch.uint8).cpu(), packed.view(torch.uint8))
    assert not ex.fallback_ops
    buffer = io.BytesIO()
    torch.save(d, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer).cpu().view(torch.uint8), packed.view(torch.uint8))
    with pytest.raises(RuntimeError) as cpu:
        packed.to(torch.float32)
    with pytest.raises(RuntimeError) as rbln:
        d.to(torch.float32)
    assert type(rbln.value) is type(cpu.value)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_mul_is_cpus_bit_for_bit_on_the_device(dtype):
    """Every pair of float8 values (NaN payloads and signs, infinities, zeros included), functional, in place and
    into a float32 out= (CPU computes in float8, then casts)."""
    every = torch.arange(256, dtype=torch.uint8).view(dtype)
    a, b = every[:, None].expand(256, 256), every[None, :].expand(256, 256)
    with torch.rbln.explain() as ex:
        product = a.rbln() * b.rbln()
        in_place = a.contiguous().rbln().mul_(b.rbln())
        wide = torch.mul(a.rbln(), b.rbln(), out=torch.empty(256, 256, device="rbln"))
    assert torch.equal(bits(product), bits(a * b)) and torch.equal(bits(in_place), bits(a * b))
    assert torch.equal(bits(wide), bits(torch.mul(a, b, out=torch.empty(256, 256))))
    assert not ex.fallback_ops, ex.fallback_ops
    assert {"aten::mul.Tensor", "aten::mul_.Tensor", "aten::mul.out"} <= set(ex.device_ops), ex.device_ops


def test_float8_times_one_broadcast_value_raises_cpus_error():
    """CPU's loop for a reduced-precision tensor and one broadcast value takes float16/bfloat16 only."""
    a = values(torch.float8_e4m3fn)[:16].view(4, 4)
    for other in (a[0, 0], a[:1, :1], 2.0, torch.tensor(2.0)):
        with pytest.raises(NotImplementedError, match="\"mul_cpu_reduced_float\" not implemented for 'Float8_e4m3fn'"):
            a * other
        with pytest.raises(NotImplementedError, match="\"mul_cpu_reduced_float\" not implemented for 'Float8_e4m3fn'"):
            a.rbln() * (other.rbln() if isinstance(other, torch.Tensor) and other.dim() else other)
    assert torch.equal(bits(a.rbln() * a[:1].rbln()), bits(a * a[:1]))  # a row broadcast is CPU's ordinary loop


@pytest.mark.parametrize("dtype", FLOAT8[:4], ids=str)
def test_mm_and_addmm_are_cpus_bit_for_bit_on_the_device(dtype):
    g = torch.Generator().manual_seed(0)
    m1, m2, bias = (torch.randn(*shape, generator=g).to(dtype) for shape in ((5, 24), (24, 7), (5, 7)))
    with torch.rbln.explain() as ex:
        product = m1.rbln() @ m2.rbln()
        biased = torch.addmm(bias.rbln(), m1.rbln(), m2.t().contiguous().t().rbln(), beta=0.5, alpha=2)
    assert torch.equal(bits(product), bits(m1 @ m2))
    assert torch.equal(bits(biased), bits(torch.addmm(bias, m1, m2, beta=0.5, alpha=2)))
    assert not ex.fallback_ops, ex.fallback_ops
    assert {"aten::mm", "aten::addmm"} <= set(ex.device_ops), ex.device_ops


@pytest.mark.parametrize("dtype", FLOAT8[:4], ids=str)
def test_abs_is_cpus_bit_for_bit_on_the_device(dtype):
    """Every float8 value: CPU's abs works on the float8 type itself, so a NaN keeps its payload and sign."""
    every = torch.arange(256, dtype=torch.uint8).view(dtype)
    with torch.rbln.explain() as ex:
        result = every.rbln().abs()
        in_place = every.rbln().abs_()
        into = torch.abs(every.rbln(), out=torch.empty(256, dtype=dtype, device="rbln"))
    for out in (result, in_place, into):
        assert torch.equal(bits(out), bits(every.abs()))
    assert not ex.fallback_ops, ex.fallback_ops
    assert {"aten::abs.out", "aten::abs_"} <= set(ex.device_ops), ex.device_ops
    for device in ("cpu", "rbln"):  # out= of another dtype: CPU's error
        with pytest.raises(RuntimeError, match="Found dtype Float but expected Float8"):
            torch.abs(every.to(device), out=torch.empty(256, device=device))
