"""Activation backwards are device kernels: gradients match CPU and run on rbln."""
import pytest
import torch
import torch.nn.functional as F

CASES = {
    "relu": (F.relu, "aten::threshold_backward"),
    "silu": (F.silu, "aten::silu_backward"),
    "sigmoid": (torch.sigmoid, "aten::sigmoid_backward"),
    "tanh": (torch.tanh, "aten::tanh_backward"),
    "gelu": (F.gelu, "aten::gelu_backward"),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "aten::gelu_backward"),
    "hardtanh": (F.hardtanh, "aten::hardtanh_backward"),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), "aten::leaky_relu_backward"),
    "softplus": (F.softplus, "aten::softplus_backward"),
    "hardsigmoid": (F.hardsigmoid, "aten::hardsigmoid_backward"),
    "hardswish": (F.hardswish, "aten::hardswish_backward"),
    "softmax": (lambda x: torch.softmax(x, -1), "aten::_softmax_backward_data"),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), "aten::_log_softmax_backward_data"),
}


@pytest.mark.parametrize("name", CASES)
def test_activation_gradient_matches_cpu_on_device(name):
    fn, backward_op = CASES[name]
    x = (torch.randn(6, 7) * 3).requires_grad_()
    grad = torch.randn(6, 7)
    fn(x).backward(grad)
    xd = x.detach().rbln().requires_grad_()
    with torch.rbln.explain() as ex:
        fn(xd).backward(grad.rbln())
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    assert backward_op in ex.device_ops, sorted(ex.device_ops)
    assert not ex.fallback_ops, ex.fallback_reasons
