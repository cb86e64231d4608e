"""PyTorch's quantized matmuls on the device (kernels/quantized): _int_mm, _weight_int8pack_mm, _scaled_mm and
the int4 weight-only ops (CPU's layout and CUDA's), with CPU's values (CUDA's where CPU has none), CPU's (or
CUDA's) errors, and no CPU fallback."""
import pytest
import torch

G = torch.Generator().manual_seed(0)


def int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=G)


def on_device(fn, *args, **kwargs):
    """fn on the rbln copies of args: its result on CPU, and that it ran with no fallback."""
    moved = [a.rbln() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.rbln.explain() as ex:
        out = fn(*moved, **{k: v.rbln() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    assert out.device.type == "rbln"
    assert not ex.fallback_ops, ex.fallback_ops
    return out.cpu()


@pytest.mark.parametrize("m,k,n", [(3, 5, 7), (32, 64, 48), (17, 128, 1)])
def test_int_mm_is_cpus_exactly(m, k, n):
    a, b = int8(m, k), int8(k, n)
    expected = torch._int_mm(a, b)
    assert torch.equal(on_device(torch._int_mm, a, b), expected)
    assert torch.equal(on_device(torch._int_mm, a.to(torch.uint8), b), torch._int_mm(a.to(torch.uint8), b))
    assert torch.equal(on_device(lambda x, y: torch._int_mm(x.t().contiguous().t(), y), a, b), expected)  # strided
    out = torch.empty(m, n, dtype=torch.int32, device="rbln")
    with torch.rbln.explain() as ex:
        torch._int_mm(a.rbln(), b.rbln(), out=out)
    assert torch.equal(out.cpu(), expected) and not ex.fallback_ops


@pytest.mark.parametrize("call", [
    lambda d: torch._int_mm(int8(4, 3).to(d), int8(4, 4).to(d)),
    lambda d: torch._int_mm(int8(4).to(d).float(), int8(4, 4).to(d)),
    lambda d: torch._int_mm(int8(4, 3, 2).to(d), int8(4, 4).to(d)),
    lambda d: torch._int_mm(int8(4, 4).to(d), int8(4, 4).to(d), out=torch.empty(4, 4, device=d)),
    lambda d: torch._int_mm(int8(4, 4).to(d), int8(4, 4).to(d), out=torch.empty(4, 3, dtype=torch.int32, device=d)),
    lambda d: torch._int_mm(int8(4, 4).to(d), int8(4, 4).to(d), out=torch.empty(4, 8, dtype=torch.int32, device=d)[:, ::2]),
    lambda d: torch._int_mm(int8(4, 4).to(d), int8(4).to(d)),
], ids=["sizes", "dim", "dim3", "out-dtype", "out-size", "out-strided", "mat2-1d"])
def test_int_mm_errors_are_cpus(call):
    with pytest.raises((RuntimeError, IndexError)) as cpu:
        call("cpu")
    with pytest.raises(type(cpu.value)) as rbln:
        call("rbln")
    assert str(rbln.value) == str(cpu.value)
    a, b = int8(3, 4), int8(4, 5)
    assert torch.equal(torch._int_mm(a.rbln(), b.rbln()).cpu(), torch._int_mm(a, b))  # the device still computes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m,k,n", [(1, 96, 43), (5, 100, 2), (3, 1024, 40)])  # blocks of 4 channels, and the rest
def test_weight_int8pack_mm_is_cpus(dtype, m, k, n):
    """The device's int8 GEMV sums in float in its own order: CPU's values to float32's (or the dtype's) rounding."""
    if k % 32 and dtype != torch.float32:
        pytest.skip("CPU's float16/bfloat16 kernel crashes (SIGSEGV) for K not a multiple of 32 in torch 2.13")
    x, w, s = torch.randn(m, k, generator=G).to(dtype), int8(n, k), torch.rand(n, generator=G).to(dtype)
    expected = torch._weight_int8pack_mm(x, w, s)
    actual = on_device(torch._weight_int8pack_mm, x, w, s)
    assert actual.dtype == dtype
    torch.testing.assert_close(actual, expected, atol=1e-3 * k ** 0.5, rtol=1e-5 if dtype == torch.float32 else 1e-2)
    rows = x.float().view(m, 1, k).expand(m, 2, k).reshape(2 * m, k)[::2].to(dtype)  # rows with a stride of 2k
    assert torch.equal(on_device(torch._weight_int8pack_mm, rows, w, s), actual)


def test_int8_weights_stay_int8_in_device_memory():
    """The packed weight takes a byte a value on the device, a quarter of float32's."""
    torch.rbln.synchronize()
    before = torch.rbln.memory_allocated()
    w = int8(1024, 1024).rbln()
    assert torch.rbln.memory_allocated() - before == 1024 * 1024
    y = torch._weight_int8pack_mm(torch.randn(1, 1024, device="rbln"), w, torch.ones(1024, device="rbln"))
    assert y.shape == (1, 1024)


@pytest.mark.parametrize("call", [
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d).double(), int8(16, 32).to(d), torch.randn(16, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d), int8(16, 31).to(d), torch.randn(16, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d), int8(16, 32).to(d), torch.randn(15, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d), torch.randn(16, 32, device=d), torch.randn(16, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(32, 2, device=d).t(), int8(16, 32).to(d), torch.randn(16, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d), int8(32, 16).to(d).t(), torch.randn(16, device=d)),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 32, device=d), int8(16, 32).to(d), torch.randn(16, device=d).half()),
    lambda d: torch._weight_int8pack_mm(torch.randn(2, 3, 32, device=d), int8(16, 32).to(d), torch.randn(16, device=d)),
], ids=["A-dtype", "K", "scales", "B-dtype", "A-strided", "B-strided", "scales-dtype", "A-3d"])
def test_weight_int8pack_mm_errors_are_cpus(call):
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as rbln:
        call("rbln")
    assert str(rbln.value) == str(cpu.value)


def fp8(*shape, dtype=torch.float8_e4m3fn):
    return (torch.randn(*shape, generator=G) * 4).to(dtype)


@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_scaled_mm_is_cpus(out_dtype, scaling):
    a, b = fp8(16, 64), fp8(32, 64).t()
    if scaling == "tensorwise":
        sa, sb = torch.tensor(0.5), torch.tensor(1.5)
    else:
        sa, sb = torch.rand(16, 1, generator=G) + 0.5, torch.rand(1, 32, generator=G) + 0.5
    kwargs = {} if out_dtype is None else {"out_dtype": out_dtype}
    expected = torch._scaled_mm(a, b, sa, sb, **kwargs)
    actual = on_device(lambda *t, **kw: torch._scaled_mm(*t, **kw), a, b, sa, sb, **kwargs)
    assert actual.dtype == expected.dtype
    if actual.element_size() == 1:  # a float8 result (no out_dtype): compare its bits
        actual, expected = actual.view(torch.uint8), expected.view(torch.uint8)
    assert torch.equal(actual, expected)
    bias = torch.randn(32, generator=G).to(out_dtype or torch.float32)
    if out_dtype is not None:  # with a bias of the output's dtype, and use_fast_accum
        expected = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=True)
        actual = on_device(lambda *t, **kw: torch._scaled_mm(*t, **kw), a, b, sa, sb, bias=bias,
                           out_dtype=out_dtype, use_fast_accum=True)
        assert torch.equal(actual, expected)


def test_scaled_mm_out_and_e5m2():
    a, b = fp8(16, 32, dtype=torch.float8_e5m2), fp8(16, 32).t()
    sa, sb = torch.tensor(2.0), torch.tensor(0.25)
    expected = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float16)
    out = torch.empty(0, dtype=torch.float16, device="rbln")
    with torch.rbln.explain() as ex:
        torch._scaled_mm(a.rbln(), b.rbln(), sa.rbln(), sb.rbln(), out_dtype=torch.float16, out=out)
    assert torch.equal(out.cpu(), expected) and not ex.fallback_ops


@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_functional_scaled_mm_is_cpus_on_the_device(scaling):
    """torch.nn.functional.scaled_mm (torch 2.13's _scaled_mm_v2), with a bias and each output dtype."""
    from torch.nn.functional import ScalingType, scaled_mm

    a, b = fp8(16, 64), fp8(32, 64).t()
    if scaling == "tensorwise":
        sa, sb, recipe = torch.tensor(0.5), torch.tensor(1.5), ScalingType.TensorWise
    else:
        sa, sb, recipe = torch.rand(16, 1, generator=G) + 0.5, torch.rand(1, 32, generator=G) + 0.5, ScalingType.RowWise
    for out_dtype in (torch.bfloat16, torch.float32):
        bias = torch.randn(32, generator=G).to(out_dtype)
        expected = scaled_mm(a, b, sa, recipe, sb, recipe, bias=bias, output_dtype=out_dtype)
        actual = on_device(lambda a, b, sa, sb, bias: scaled_mm(a, b, sa, recipe, sb, recipe, bias=bias,
                                                                 output_dtype=out_dtype), a, b, sa, sb, bias)
        assert torch.equal(actual, expected)


def blocks(scale, rows, cols, row_block, col_block):
    return scale.repeat_interleave(row_block, 0)[:rows].repeat_interleave(col_block, 1)[:, :cols]


@pytest.mark.parametrize("recipes", ["1x128,1x128", "1x128,128x128", "128x128,1x128"])
def test_blockwise_scaled_mm_has_cudas_layouts_and_values_on_the_device(recipes):
    """CUDA's DeepSeek-style FP8 (CPU has none): scales per 1x128 or 128x128 block in CUDA's layouts (1x128:
    [rows, K/128] column-major; 128x128: [round_up(K/128, 4), blocks of the other dim] column-major), equal to the
    float64 product of the dequantized operands to bfloat16 rounding."""
    from torch.nn.functional import ScalingType, scaled_mm

    m, k, n = 256, 384, 256
    kb, l4 = k // 128, 4  # round_up(3, 4)
    a, b = fp8(m, k), fp8(n, k).t()
    row_scales = {"a": torch.rand(kb, m, generator=G).t() + 0.5, "b": torch.rand(kb, n, generator=G).t() + 0.5}
    square_scales = {"a": torch.rand(m // 128, l4, generator=G).t() + 0.5,
                     "b": torch.rand(n // 128, l4, generator=G).t() + 0.5}
    recipe_a, recipe_b = recipes.split(",")
    sa = row_scales["a"] if recipe_a == "1x128" else square_scales["a"]
    sb = row_scales["b"] if recipe_b == "1x128" else square_scales["b"]
    full_a = blocks(sa, m, k, 1, 128) if recipe_a == "1x128" else blocks(sa[:kb].t(), m, k, 128, 128)
    full_b = blocks(sb.t(), k, n, 128, 1) if recipe_b == "1x128" else blocks(sb[:kb], k, n, 128, 128)
    kind = {"1x128": ScalingType.BlockWise1x128, "128x128": ScalingType.BlockWise128x128}
    with torch.rbln.explain() as ex:
        out = scaled_mm(a.rbln(), b.rbln(), sa.rbln(), kind[recipe_a], sb.rbln(), kind[recipe_b],
                        output_dtype=torch.bfloat16)
    assert out.device.type == "rbln" and out.dtype == torch.bfloat16 and not ex.fallback_ops
    expected = (a.double() * full_a.double()) @ (b.double() * full_b.double())
    torch.testing.assert_close(out.cpu().double(), expected, rtol=8e-3, atol=8e-3 * expected.abs().max().item())
    with pytest.raises(RuntimeError, match="blockwise scaling"):  # b's scales row-major: CUDA's error
        scaled_mm(a.rbln(), b.rbln(), sa.rbln(), kind[recipe_a], sb.contiguous().rbln(), kind[recipe_b])
    assert torch.equal(out.cpu(), scaled_mm(a.rbln(), b.rbln(), sa.rbln(), kind[recipe_a], sb.rbln(), kind[recipe_b],
                                            output_dtype=torch.bfloat16).cpu())  # the device goes on, the same


@pytest.mark.parametrize("recipes", ["1x128,1x128", "1x128,128x128", "128x128,1x128"])
def test_blockwise_scaled_mm_from_the_scales_shapes_as_cuda(recipes):
    """torch._scaled_mm tells CUDA's blocks of 128 apart by the scales' shapes (1x128: [m, K/128] and [K/128, n];
    128x128: [m/128, K/128] and [K/128, n/128]; CPU raises); the values are the float64 product of the dequantized
    operands to bfloat16 rounding, with the bias added; a shape of no recipe gets the meta function's error."""
    m, k, n = 200, 320, 144  # blocks that do not divide the sizes
    mb, kb, nb = 2, 3, 2
    a, b = fp8(m, k), fp8(n, k).t()
    recipe_a, recipe_b = recipes.split(",")
    sa = torch.rand(*((m, kb) if recipe_a == "1x128" else (mb, kb)), generator=G) + 0.5
    sb = torch.rand(*((kb, n) if recipe_b == "1x128" else (kb, nb)), generator=G) + 0.5
    full_a = blocks(sa, m, k, 1 if recipe_a == "1x128" else 128, 128)
    full_b = blocks(sb, k, n, 128, 1 if recipe_b == "1x128" else 128)
    bias = torch.randn(n, generator=G).bfloat16()
    out = on_device(torch._scaled_mm, a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    expected = (a.double() * full_a.double()) @ (b.double() * full_b.double()) + bias.double()
    torch.testing.assert_close(out.double(), expected, rtol=8e-3, atol=8e-3 * expected.abs().max().item())
    with pytest.raises(RuntimeError, match="Invalid scaling configuration"):
        torch._scaled_mm(a.rbln(), b.rbln(), sa[:, :2].rbln(), sb.rbln(), out_dtype=torch.bfloat16)


@pytest.mark.parametrize("call,cuda_error,cpu_raises", [
    (lambda d: torch._scaled_mm(fp8(16, 32).to(d), fp8(16, 32).to(d).t(), torch.ones(3, device=d), torch.tensor(2., device=d)),
     "scale tensors must be 2D", True),
    # CPU's kernel computes with a float16 tensorwise scale; CUDA's (its meta function) refuses it.
    (lambda d: torch._scaled_mm(fp8(16, 32).to(d), fp8(16, 32).to(d).t(), torch.tensor(1., device=d).half(), torch.tensor(2., device=d)),
     r"must be float \(fp32\) tensors", False),
    (lambda d: torch._scaled_mm(torch.randn(16, 32, device=d), fp8(16, 32).to(d).t(), torch.tensor(1., device=d), torch.tensor(2., device=d)),
     "Expected both inputs to be fp8", True),
], ids=["scale-shape", "scale-dtype", "operand-dtype"])
def test_scaled_mm_bad_scales_raise_and_the_device_stays_usable(call, cuda_error, cpu_raises):
    if cpu_raises:
        with pytest.raises((RuntimeError, ValueError)):
            call("cpu")
    with pytest.raises(RuntimeError, match=cuda_error):
        call("rbln")
    a, b, one = fp8(16, 32), fp8(16, 32).t(), torch.tensor(1.0)
    expected = torch._scaled_mm(a, b, one, one, out_dtype=torch.float32)
    assert torch.equal(on_device(torch._scaled_mm, a, b, one, one, out_dtype=torch.float32), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_int4_weight_only_matmul_is_cpus_with_packed_weights_on_the_device(dtype):
    n, k, group = 48, 128, 32
    w = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=G)
    packed = on_device(torch._convert_weight_to_int4pack_for_cpu, w, 2)
    assert torch.equal(packed, torch._convert_weight_to_int4pack_for_cpu(w, 2)) and packed.dtype == torch.uint8
    assert packed.numel() == n * k // 2  # two values a byte in device memory
    scales_zeros = torch.randn(k // group, n, 2, generator=G).to(dtype)
    x = torch.randn(3, k, generator=G).to(dtype)
    expected = torch._weight_int4pack_mm_for_cpu(x, packed, group, scales_zeros)
    assert torch.equal(on_device(torch._weight_int4pack_mm_for_cpu, x, packed, group, scales_zeros), expected)


def tinygemm_pack(w, inner_k_tiles):
    """CUDA's _convert_weight_to_int4pack, written from int4mm.cu's indexing: int4 values w [n, k] (0..15) into
    int32 words [n / 8][k / (inner_k_tiles * 16)][32][inner_k_tiles / 2]. Lane t of a word holds row t // 4 of
    its 8-row tile and, per k-tile pair, the bytes t % 4 + {0, 4, 8, 12} of [n][k / 2] (the even k in the high
    nibble): their high nibbles in bits 0-15, their low nibbles in bits 16-31."""
    n, k = w.shape
    data = (w[:, ::2] << 4 | w[:, 1::2]).to(torch.int64)  # [n, k / 2], as torchao packs it
    out = torch.zeros(n // 8, k // (inner_k_tiles * 16), 32, inner_k_tiles // 2, dtype=torch.int64)
    for t in range(32):
        rows = data[t // 4 :: 8]  # [n / 8, k / 2]
        for pair in range(inner_k_tiles // 2):
            for i, offset in enumerate((0, 4, 8, 12)):
                byte = rows[:, t % 4 + offset + 16 * pair :: inner_k_tiles * 8]  # [n / 8, k_outer]
                out[:, :, t, pair] |= (byte >> 4) << (4 * i) | (byte & 0xF) << (16 + 4 * i)
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


@pytest.mark.parametrize("inner_k_tiles", [2, 4, 8])
def test_int4_pack_is_cudas_layout(inner_k_tiles):
    n, k = 24, 256
    w = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=G)
    packed = on_device(torch._convert_weight_to_int4pack, (w[:, ::2] << 4 | w[:, 1::2]).to(torch.uint8),
                       inner_k_tiles)
    assert packed.dtype == torch.int32 and packed.numel() * 8 == n * k  # eight values a word in device memory
    assert torch.equal(packed, tinygemm_pack(w, inner_k_tiles))


@pytest.mark.parametrize("m", [5, 1])  # batch 1 with innerKTiles 8 and groups of 128 or more: the AVX-512 kernel
@pytest.mark.parametrize("inner_k_tiles,group", [(8, 32), (2, 128), (4, 256), (8, 128), (8, 256)])
def test_int4_weight_only_matmul_in_cudas_layout_matches_cpus_op(inner_k_tiles, group, m):
    """_weight_int4pack_mm over CUDA's layout gives what CPU's _weight_int4pack_mm_for_cpu gives for the same
    int4 weights, scales and zeros (both: (q - 8) * scale + zero per group of k), to bfloat16 rounding, and
    what the dequantized weights give in float64."""
    n, k = 48, 512
    w = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=G)
    scales_zeros = (torch.rand(k // group, n, 2, generator=G) * 0.1).to(torch.bfloat16)
    x = torch.randn(m, k, generator=G).to(torch.bfloat16)
    packed = tinygemm_pack(w, inner_k_tiles)
    actual = on_device(torch._weight_int4pack_mm, x, packed, group, scales_zeros)
    assert actual.dtype == torch.bfloat16 and actual.shape == (m, n)
    cpu = torch._weight_int4pack_mm_for_cpu(x, torch._convert_weight_to_int4pack_for_cpu(w, inner_k_tiles), group,
                                            scales_zeros)
    ulp = 2.0 ** -8 * cpu.abs().max().item()  # bfloat16's rounding at the outputs' scale: sums round differently
    torch.testing.assert_close(actual, cpu, atol=ulp, rtol=2.0 ** -7)
    scale, zero = scales_zeros.double().repeat_interleave(group, 0).unbind(-1)  # [k, n] each
    dequantized = ((w.t().double() - 8) * scale + zero).to(torch.bfloat16).double()
    torch.testing.assert_close(actual.double(), x.double() @ dequantized, atol=ulp, rtol=2.0 ** -8)


@pytest.mark.parametrize("call", [
    lambda x, p, sz: torch._weight_int4pack_mm(x.float(), p, 32, sz),  # CUDA computes bfloat16 only
    lambda x, p, sz: torch._weight_int4pack_mm(x, p, 48, sz),  # not a group size CUDA has
    lambda x, p, sz: torch._weight_int4pack_mm(x, p, 32, sz[:, :8]),  # scales for other columns
    lambda x, p, sz: torch._convert_weight_to_int4pack(p.view(torch.uint8).flatten()[:64].view(2, 32), 3),
], ids=["float32", "group48", "scales", "inner_k_tiles"])
def test_int4_weight_only_errors_are_cudas_and_the_device_stays_usable(call):
    w = torch.randint(0, 16, (16, 256), dtype=torch.int32, generator=G)
    x = torch.randn(2, 256, generator=G).to(torch.bfloat16).rbln()
    packed, sz = tinygemm_pack(w, 8).rbln(), torch.rand(8, 16, 2, generator=G).to(torch.bfloat16).rbln()
    with pytest.raises(RuntimeError, match="Expected .* to be true"):
        call(x, packed, sz)
    assert torch._weight_int4pack_mm(x, packed, 32, sz).shape == (2, 16)


@pytest.mark.parametrize("bias", [False, True])
def test_dynamically_quantized_int4_matmul_is_cpus(bias):
    """int4 weights [N, K/2] packed with group-wise scales (CPU's reference layout on x86), activations quantized
    per row on the fly."""
    k, n, group = 64, 32, 32
    weights = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=G)
    scales, b = torch.randn(n, k // group, generator=G), torch.randn(n, generator=G) if bias else None
    packed = torch._dyn_quant_pack_4bit_weight(weights, scales, b, group, k, n)
    assert torch.equal(on_device(torch._dyn_quant_pack_4bit_weight, weights, scales, b, group, k, n), packed)
    x = torch.randn(3, k, generator=G)
    expected = torch._dyn_quant_matmul_4bit(x, packed, group, k, n)
    assert torch.equal(on_device(torch._dyn_quant_matmul_4bit, x, packed, group, k, n), expected)
