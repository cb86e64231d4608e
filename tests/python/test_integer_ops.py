"""Integer and bool inputs of device kernels that CPU accepts: exact results, on the device, and CPU's
errors where CPU has no kernel."""
import pytest
import torch
import torch.nn.functional as F


def _on_device(fn, *args, ops):
    expected = fn(*args)
    with torch.rbln.explain() as ex:
        actual = fn(*[a.rbln() for a in args])
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)
    assert actual.dtype == expected.dtype
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ops <= set(ex.device_ops), sorted(ex.device_ops)


def _ints(seed, *shape, dtype=torch.int64, high=5):
    return torch.randint(-high, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_int64_convolution():
    conv = {"aten::convolution_overrideable"}
    _on_device(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), _ints(0, 2, 4, 7, 6), _ints(1, 6, 4, 3, 3),
               _ints(2, 6), ops=conv)
    _on_device(lambda x, w: F.conv1d(x, w, groups=2, dilation=2), _ints(3, 2, 4, 9), _ints(4, 6, 2, 3), ops=conv)
    _on_device(lambda x, w: F.conv3d(x, w), _ints(5, 1, 2, 4, 4, 4), _ints(6, 3, 2, 2, 2, 2), ops=conv)
    _on_device(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), _ints(7, 2, 3, 4, 5),
               _ints(8, 3, 2, 3, 3), ops=conv)


def test_other_integer_convolutions_run_on_cpu_and_raise_as_it_does():
    x, w = _ints(0, 2, 3, 4, 5, dtype=torch.int32), _ints(1, 3, 2, 3, 3, dtype=torch.int32)
    with torch.rbln.explain() as ex:
        torch.testing.assert_close(F.conv2d(x.rbln(), w.transpose(0, 1).rbln()).cpu(),
                                   F.conv2d(x, w.transpose(0, 1)), rtol=0, atol=0)
    assert "aten::convolution_overrideable" in ex.fallback_ops
    with pytest.raises(RuntimeError) as cpu_error:
        F.conv_transpose2d(x, w)
    with pytest.raises(RuntimeError) as rbln_error:
        F.conv_transpose2d(x.rbln(), w.rbln())
    assert str(rbln_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]
    torch.testing.assert_close((x.rbln() + 1).cpu(), x + 1)  # the device still works


def test_int64_pooling_and_padding():
    x = _ints(0, 2, 3, 7, 8, high=1000)
    _on_device(lambda t: F.avg_pool2d(t, 3, stride=2, padding=1), x, ops={"aten::avg_pool2d"})  # integer division
    _on_device(lambda t: F.avg_pool2d(t, 2, ceil_mode=True, count_include_pad=False), x, ops={"aten::avg_pool2d"})
    _on_device(lambda t: F.avg_pool3d(t, 2), x.view(2, 3, 7, 2, 4)[..., :2, :], ops={"aten::avg_pool3d"})
    _on_device(lambda t: F.max_pool2d(t, 3, stride=2, padding=1), x, ops={"aten::max_pool2d_with_indices"})
    _on_device(lambda t: F.max_pool3d(t, 2), x.view(2, 3, 7, 2, 4), ops={"aten::max_pool3d_with_indices"})
    _on_device(lambda t: F.pad(t, (1, 2, 2, 1), mode="replicate"), x, ops={"aten::replication_pad2d"})


def test_integer_rounding_is_the_identity_beyond_double_precision():
    x = torch.tensor([2**60 + 1, -(2**55) - 3, 7])
    for fn, op in ((torch.round, "round"), (torch.trunc, "trunc"), (torch.floor, "floor"), (torch.ceil, "ceil")):
        _on_device(fn, x, ops={f"aten::{op}"})


def test_bool_and_integer_reductions_and_dropout_backward():
    mask = torch.tensor([[True, False, True], [False, False, True]])
    _on_device(torch.nansum, mask, ops={"aten::nansum"})
    _on_device(torch.sgn, mask, ops={"aten::sgn"})
    # CPU's grad * mask * scale: an integer grad gives the default float dtype
    _on_device(lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0), _ints(0, 2, 3), mask,
               ops={"aten::native_dropout_backward"})


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_small_integer_arithmetic_wraps_as_on_cpu_on_the_device(dtype):
    info = torch.iinfo(dtype)
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(info.min, info.max + 1, (7, 9), generator=gen, dtype=dtype)  # overflowing sums and products
    b = torch.randint(info.min, info.max + 1, (9,), generator=gen, dtype=dtype)  # broadcast
    _on_device(lambda x, y: x + y, a, b, ops={"aten::add.Tensor"})
    _on_device(lambda x, y: torch.add(x, y, alpha=3), a, b, ops={"aten::add.Tensor"})
    _on_device(lambda x, y: x - y * 2, a, b, ops={"aten::sub.Tensor", "aten::mul.Tensor"})
    _on_device(lambda x, y: x * y, a, b, ops={"aten::mul.Tensor"})
    _on_device(lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), a, b,
               ops={"aten::maximum", "aten::minimum", "aten::sub.Tensor"})
    _on_device(lambda x, y: (x & y) | (x ^ ~y), a, b,
               ops={"aten::bitwise_and.Tensor", "aten::bitwise_or.Tensor", "aten::bitwise_xor.Tensor",
                    "aten::bitwise_not"})
    _on_device(lambda x: -x.abs(), a, ops={"aten::abs", "aten::neg"})
    for compare in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge):
        _on_device(compare, a, b, ops={f"aten::{compare.__name__}.Tensor"})
        _on_device(lambda x: compare(x, 3), a, ops={f"aten::{compare.__name__}.Scalar"})
    # An image batch as a pipeline holds it: uint8 with a Python scalar, in place.
    img = torch.randint(0, 256, (2, 3, 4, 4), generator=gen, dtype=torch.uint8)
    _on_device(lambda x: x.clone().add_(200), img, ops={"aten::add_.Tensor"})


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_shift_operators_are_cpus_on_the_device(dtype):
    """`<<` and `>>` (torchao packs int4 weights with them), by a Python int and by a tensor of shifts, out of
    range ones (negative, past the width) included, and in place."""
    x = torch.tensor([0, 1, -1, 7, -8, 2**20, -(2**20), 12345], dtype=dtype)
    by = torch.tensor([0, 1, 3, 4, 31, 40, -1, 63], dtype=dtype)
    _on_device(lambda a: a << 4, x, ops={"aten::__lshift__.Scalar"})
    _on_device(lambda a: a >> 3, x, ops={"aten::__rshift__.Scalar"})
    _on_device(lambda a, b: a << b, x, by, ops={"aten::__lshift__.Tensor"})
    _on_device(lambda a, b: a >> b, x, by, ops={"aten::__rshift__.Tensor"})

    def shift_in_place(a, b):
        a = a.clone()
        a <<= b
        a >>= 2
        return a

    _on_device(shift_in_place, x, by, ops={"aten::__ilshift__.Tensor", "aten::__irshift__.Scalar"})
