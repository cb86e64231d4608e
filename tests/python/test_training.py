"""Training on the device: losses, autograd and optimizers match CPU with no fallback."""
import pytest
import torch
import torch.nn.functional as F

from side_by_side import train_side_by_side


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_forward_and_backward_on_device(reduction):
    x = torch.randn(8, 5, requires_grad=True)
    target = torch.tensor([0, 4, 2, 1, 3, 3, -100, 0])
    weight = torch.rand(5)
    xd = x.detach().rbln().requires_grad_()
    expected = F.cross_entropy(x, target, weight=weight, reduction=reduction)
    with torch.rbln.explain() as ex:
        actual = F.cross_entropy(xd, target.rbln(), weight=weight.rbln(), reduction=reduction)
        actual.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(actual.cpu(), expected)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert {"aten::nll_loss_forward", "aten::nll_loss_backward", "aten::_log_softmax_backward_data"} <= set(
        ex.device_ops
    )


def test_bad_target_surfaces_at_the_next_sync():
    loss = F.nll_loss(torch.randn(2, 3).rbln(), torch.tensor([0, 7]).rbln())
    with pytest.raises(IndexError, match="aten::nll_loss_forward: Target 7 is out of bounds"):
        loss.cpu()
    assert torch.equal((torch.ones(2, device="rbln") * 2).cpu(), torch.full((2,), 2.0))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("foreach", [False, True])
def test_mlp_training_matches_cpu_with_no_fallback(optimizer, foreach):
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=foreach),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01, foreach=foreach),
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=foreach),
    }[optimizer]
    torch.manual_seed(0)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    losses, models, ex = train_side_by_side(mlp, make, [(x, y)] * 20,
                                            lambda model, inputs, target: F.cross_entropy(model(inputs), target))
    torch.testing.assert_close(losses["rbln"], losses["cpu"], rtol=1e-4, atol=1e-5)
    assert losses["cpu"][-1] < losses["cpu"][0]
    assert not ex.fallback_ops, ex.fallback_reasons
    # The CNN and transformer versions (with their listed fallbacks) are in test_models.py.


FUSED_STEPS = {  # optimizer, its options (lr: a float unless given as a tensor)
    **{f"{adam.__name__.lower()}_{name}": (adam, {"lr": 0.01, **options}) for adam in (torch.optim.Adam, torch.optim.AdamW)
       for name, options in [("default", {}), ("amsgrad", {"amsgrad": True, "weight_decay": 0.1}),
                             ("maximize", {"maximize": True}), ("tensor_lr", {"lr": torch.tensor(0.01)})]},
    "sgd": (torch.optim.SGD, {"lr": 0.05}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "sgd_nesterov": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    "sgd_dampening_maximize": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.5, "maximize": True}),
    "sgd_tensor_lr": (torch.optim.SGD, {"lr": torch.tensor(0.05), "momentum": 0.9}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.05}),
    "adagrad_decay_maximize": (torch.optim.Adagrad, {"lr": 0.05, "lr_decay": 0.1, "weight_decay": 0.1, "maximize": True}),
    "adagrad_tensor_lr": (torch.optim.Adagrad, {"lr": torch.tensor(0.05)}),
}


@pytest.mark.parametrize("case", FUSED_STEPS)
def test_fused_optimizer_steps_on_the_device_with_cpus_values(case):
    optimizer, options = FUSED_STEPS[case]
    torch.manual_seed(0)
    make = lambda p: optimizer(p, **options, fused=True)  # noqa: E731
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    losses, models, ex = train_side_by_side(mlp, make, [(x, y)] * 5,
                                            lambda model, inputs, target: F.cross_entropy(model(inputs), target))
    torch.testing.assert_close(losses["rbln"], losses["cpu"], rtol=1e-5, atol=1e-6)
    for p_cpu, p_rbln in zip(models["cpu"].parameters(), models["rbln"].parameters(), strict=True):
        torch.testing.assert_close(p_rbln.cpu(), p_cpu, rtol=1e-5, atol=1e-6)
    fused = f"aten::_fused_{optimizer.__name__.lower()}_" + (".tensor_lr" if torch.is_tensor(options["lr"]) else "")
    assert ex.device_ops.get(fused) == 5, sorted(ex.device_ops)
    assert not ex.fallback_ops, ex.fallback_reasons


def test_fused_sgd_and_adagrad_check_like_cuda(assert_device_works):
    p, g = torch.ones(4, device="rbln"), torch.ones(4, device="rbln", dtype=torch.float64)
    with pytest.raises(RuntimeError, match="params, grads, and momentum_buffer_list must have same dtype, device"):
        torch._fused_sgd_([p], [g], [torch.zeros(4, device="rbln")], weight_decay=0.0, momentum=0.9, lr=0.1,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=True)
    with pytest.raises(RuntimeError, match="Check failed: momentum == 0"):
        torch._fused_sgd_([p], [p.clone()], [], weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False)
    with pytest.raises(RuntimeError, match="params, grads, and state_sums must have same dtype, device"):
        torch._fused_adagrad_([p], [g], [torch.zeros(4, device="rbln")], [torch.zeros((), device="rbln")], lr=0.1,
                              lr_decay=0.0, weight_decay=0.0, eps=1e-10, maximize=False)
    assert_device_works()


def test_fused_adam_skips_the_step_where_the_grad_scaler_found_inf_and_checks_like_cuda(assert_device_works):
    p = torch.ones(4, device="rbln", requires_grad=True)
    opt = torch.optim.AdamW([p], lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("rbln", init_scale=2.0)
    scaler.scale((p * float("inf")).sum()).backward()  # an inf gradient: the scaler's found_inf skips the step on the device
    scaler.step(opt)
    scaler.update()
    assert torch.equal(p.detach().cpu(), torch.ones(4))
    assert scaler.get_scale() == 1.0  # backed off
    grads = [torch.ones(4, device="rbln", dtype=torch.float64)]  # a gradient of another dtype than its parameter
    with pytest.raises(RuntimeError, match="params, grads, exp_avgs, and exp_avg_sqs must have same dtype, device"):
        torch._fused_adamw_([p.detach()], grads, [torch.zeros(4, device="rbln")], [torch.zeros(4, device="rbln")], [],
                            [torch.zeros((), device="rbln")], lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0,
                            eps=1e-8, amsgrad=False, maximize=False)
    assert_device_works()


def test_dropout_draws_from_the_device_generator():
    torch.rbln.manual_seed(3)
    a = F.dropout(torch.ones(10000, device="rbln"), p=0.25)
    torch.rbln.manual_seed(3)
    b = F.dropout(torch.ones(10000, device="rbln"), p=0.25)
    assert torch.equal(a.cpu(), b.cpu())
    kept = (a != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.allclose(a[a != 0].cpu(), torch.tensor(1 / 0.75))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_match_cpu_on_device(kind):
    """nn.LSTM/GRU call the fused cells PyTorch reserves for accelerators: forward and gradients vs CPU."""
    torch.manual_seed(0)
    cpu = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True)
    dev = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True).rbln()
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 5, 6)
    out, _ = cpu(x)
    out.sum().backward()
    with torch.rbln.explain() as ex:
        dev_out, _ = dev(x.rbln())
        dev_out.sum().backward()
    torch.testing.assert_close(dev_out.cpu(), out.detach(), atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    cell = f"aten::_thnn_fused_{kind.lower()}_cell"
    assert cell in ex.device_ops and not ex.fallback_ops, ex.fallback_reasons
