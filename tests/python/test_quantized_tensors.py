"""Quantized tensors on rbln (quint8, qint8, qint32; per tensor and per channel), as QuantizedCUDA's: created,
copied between devices, viewed, saved and dequantized on the device with CPU's values bit for bit, CPU's errors
for bad input, and no CPU fallback (ops.yaml's `key: QuantizedPrivateUse1` entries, kernels/quantized/QTensor.cpp)."""
import io
import warnings

import pytest
import torch

QTYPES = [torch.quint8, torch.qint8, torch.qint32]

# torch 2.13 deprecates creating these dtypes (a warning per process, the same on CPU).
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")


def values():
    """Normal values, exact halves (ties of the rounding), values far outside every range, infinities."""
    torch.manual_seed(0)
    return torch.cat([torch.randn(997) * 4, torch.arange(-64, 64) * 0.25, torch.tensor([3e9, -3e9, 1e30, -1e30]),
                      torch.tensor([float("inf"), float("-inf")])])


def assert_same_qtensor(got, want):
    assert got.device.type == "rbln" and got.is_quantized and got.dtype == want.dtype
    assert got.qscheme() == want.qscheme() and got.shape == want.shape
    assert torch.equal(got.int_repr().cpu(), want.int_repr())
    assert torch.equal(got.dequantize().cpu(), want.dequantize())


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("scale,zero_point", [(0.0123456789, 3), (0.37, 10), (0.5, 0), (1e-3, 17)])
def test_quantize_per_tensor_and_dequantize_are_cpus_bit_for_bit_on_the_device(dtype, scale, zero_point):
    x = values()
    with torch.rbln.explain() as ex:
        q = torch.quantize_per_tensor(x.rbln(), scale, zero_point, dtype)
        dequantized = q.dequantize()
    want = torch.quantize_per_tensor(x, scale, zero_point, dtype)
    assert_same_qtensor(q, want)
    assert dequantized.device.type == "rbln" and dequantized.dtype == torch.float32
    assert q.q_scale() == want.q_scale() and q.q_zero_point() == zero_point
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ex.device_ops.get("aten::quantize_per_tensor") == 1 and ex.device_ops.get("aten::dequantize.self") == 1


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("axis", [0, 1, 3])
def test_quantize_per_channel_and_dequantize_are_cpus_on_the_device(dtype, axis):
    torch.manual_seed(axis)
    x = (torch.randn(4, 3, 5, 6) * 3).contiguous(memory_format=torch.channels_last if axis == 1 else torch.contiguous_format)
    channels = x.shape[axis]
    scales = torch.rand(channels, dtype=torch.float64) * 0.2 + 0.01
    zero_points = torch.randint(0, 10, (channels,))
    with torch.rbln.explain() as ex:
        q = torch.quantize_per_channel(x.rbln(), scales.rbln(), zero_points.rbln(), axis, dtype)
    want = torch.quantize_per_channel(x, scales, zero_points, axis, dtype)
    assert_same_qtensor(q, want)
    assert q.stride() == want.stride()  # channels_last stays channels_last, as on CPU
    assert q.q_per_channel_axis() == axis
    assert torch.equal(q.q_per_channel_scales().cpu(), want.q_per_channel_scales())
    assert torch.equal(q.q_per_channel_zero_points().cpu(), want.q_per_channel_zero_points())
    assert not ex.fallback_ops, ex.fallback_reasons


@pytest.mark.parametrize("dtype", QTYPES)
def test_copies_views_and_clones_keep_values_and_parameters(dtype):
    x = torch.randn(3, 4, 5)
    want = torch.quantize_per_tensor(x, 0.05, 2, dtype)
    with torch.rbln.explain() as ex:
        q = want.to("rbln")  # CPU -> device
        assert_same_qtensor(q, want)
        back = q.cpu()  # device -> CPU
        assert back.device.type == "cpu" and torch.equal(back.int_repr(), want.int_repr())
        assert back.q_scale() == want.q_scale() and back.q_zero_point() == want.q_zero_point()
        assert_same_qtensor(q.clone(), want)
        assert_same_qtensor(q.transpose(0, 2).contiguous(), want.transpose(0, 2).contiguous())
        assert_same_qtensor(q[1:, ::2], want[1:, ::2])
        assert_same_qtensor(q.view(12, 5), want.view(12, 5))
        assert_same_qtensor(q.reshape(-1), want.reshape(-1))
        assert_same_qtensor(q.unsqueeze(1).squeeze(1), want)
        assert_same_qtensor(q.permute(2, 0, 1), want.permute(2, 0, 1))
        empty = torch.empty_like(q)
        assert empty.device.type == "rbln" and empty.dtype == dtype and empty.q_scale() == 0.05
    assert not ex.fallback_ops, ex.fallback_reasons


def test_make_quantized_tensor_reinterprets_device_integers_as_cpu():
    ints = torch.randint(-128, 128, (4, 6), dtype=torch.int8)
    scales, zero_points = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), torch.tensor([0, 1, 2, 3])
    with torch.rbln.explain() as ex:
        per_tensor = torch._make_per_tensor_quantized_tensor(ints.rbln(), 0.5, 1)
        per_channel = torch._make_per_channel_quantized_tensor(ints.rbln(), scales.rbln(), zero_points.rbln(), 0)
    assert_same_qtensor(per_tensor, torch._make_per_tensor_quantized_tensor(ints, 0.5, 1))
    assert_same_qtensor(per_channel, torch._make_per_channel_quantized_tensor(ints, scales, zero_points, 0))
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ex.device_ops.get("aten::_make_per_tensor_quantized_tensor") == 1


def test_quantized_values_take_their_own_size_in_device_memory():
    x = torch.randn(1 << 20, device="rbln")
    torch.rbln.synchronize()
    before = torch.rbln.memory_allocated()
    q = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    torch.rbln.synchronize()
    assert torch.rbln.memory_allocated() - before == q.numel()  # one byte a value, a quarter of float32's
    del q
    assert torch.rbln.memory_allocated() == before


@pytest.mark.parametrize("per_channel", [False, True])
def test_save_and_load_keep_a_device_quantized_tensor(per_channel):
    x = torch.randn(4, 6)
    if per_channel:
        want = torch.quantize_per_channel(x, torch.rand(6, dtype=torch.float64) + 0.1, torch.arange(6), 1, torch.quint8)
    else:
        want = torch.quantize_per_tensor(x, 0.2, 5, torch.quint8)
    buffer = io.BytesIO()
    with torch.rbln.explain() as ex:
        torch.save(want.to("rbln"), buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
    assert_same_qtensor(loaded, want)
    assert not ex.fallback_ops, ex.fallback_reasons


def test_a_quantized_checkpoint_saved_by_one_process_loads_onto_the_device_in_another(run_python, tmp_path):
    """A per-channel int8 weight quantized on rbln, saved with torch.save, loaded by a fresh process onto rbln and
    used in a linear layer there as its CPU copy is on the CPU; both processes exit cleanly (run_python checks)."""
    path = str(tmp_path / "checkpoint.pt")
    saved = run_python(f"""
        torch.manual_seed(0)
        layer = torch.nn.Linear(16, 8)
        scales = torch.rand(8, dtype=torch.float64).rbln() / 50 + 1e-3
        weight = torch.quantize_per_channel(layer.weight.detach().rbln(), scales, torch.zeros(8, dtype=torch.long).rbln(),
                                            0, torch.qint8)
        torch.save({{"weight": weight, "bias": layer.bias.detach().rbln()}}, {path!r})
        print(json.dumps(weight.int_repr().cpu().tolist()))
    """)
    loaded = run_python(f"""
        state = torch.load({path!r})
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
        with torch.rbln.explain() as ex:
            y = torch.nn.functional.linear(x.rbln(), state["weight"].dequantize(), state["bias"])
        cpu = {{k: v.cpu() for k, v in state.items()}}
        expected = torch.nn.functional.linear(x, cpu["weight"].dequantize(), cpu["bias"])
        print(json.dumps({{"device": state["weight"].device.type, "quantized": state["weight"].is_quantized,
                          "ints": state["weight"].int_repr().cpu().tolist(), "fallbacks": ex.fallback_ops,
                          "max_error": (y.cpu() - expected).abs().max().item()}}))
    """)
    assert loaded["device"] == "rbln" and loaded["quantized"] and loaded["ints"] == saved
    assert not loaded["fallbacks"] and loaded["max_error"] < 1e-5
    assert all(-128 <= v <= 127 for row in saved for v in row) and any(v != 0 for row in saved for v in row)


BAD = {  # name -> a call on `device` that CPU rejects
    "float64 input": lambda d: torch.quantize_per_tensor(torch.randn(3, dtype=torch.float64, device=d), 0.1, 0, torch.quint8),
    "int input": lambda d: torch.quantize_per_tensor(torch.ones(3, dtype=torch.int32, device=d), 0.1, 0, torch.qint8),
    "zero point above quint8": lambda d: torch.quantize_per_tensor(torch.randn(3, device=d), 0.1, 300, torch.quint8),
    "zero point below qint8": lambda d: torch.quantize_per_tensor(torch.randn(3, device=d), 0.1, -200, torch.qint8),
    "quantized into float": lambda d: torch.zeros(3, device=d).copy_(
        torch.quantize_per_tensor(torch.randn(3, device=d), 0.1, 0, torch.quint8)),
    "channels and scales differ": lambda d: torch.quantize_per_channel(
        torch.randn(2, 3, device=d), torch.ones(2, dtype=torch.float64, device=d), torch.zeros(2, dtype=torch.long, device=d),
        1, torch.qint8),
    "non-integer values": lambda d: torch._make_per_tensor_quantized_tensor(torch.randn(3, device=d), 0.1, 0),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_gets_cpus_error_and_the_device_goes_on(name):
    with pytest.raises(Exception) as on_cpu:
        BAD[name]("cpu")
    with pytest.raises(type(on_cpu.value)) as on_rbln:
        BAD[name]("rbln")
    assert str(on_rbln.value).split("\n")[0] == str(on_cpu.value).split("\n")[0]
    q = torch.quantize_per_tensor(torch.ones(2, device="rbln"), 0.5, 0, torch.quint8)
    assert q.int_repr().cpu().tolist() == [2, 2]


def test_scales_on_another_device_are_refused_as_on_cuda():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.quantize_per_channel(torch.randn(2, 3, device="rbln"), torch.ones(3, dtype=torch.float64),
                                   torch.zeros(3, dtype=torch.long), 1, torch.qint8)


def test_sub_byte_dtypes_say_they_are_not_implemented():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match="QUInt4x2 are not implemented on rbln"):
            torch.quantize_per_tensor(torch.randn(4, device="rbln"), 0.1, 0, torch.quint4x2)
