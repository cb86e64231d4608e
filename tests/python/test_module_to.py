"""module.to("rbln") keeps Parameter objects, as on CUDA: ties stay tied and optimizers built before the move
train the moved model (rbln registers `_has_compatible_shallow_copy_type`, runtime/device/RBLNOps.cpp)."""
import copy

import pytest
import torch
import torch.nn.functional as F


def gpt2(vocab=500):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_positions=32, n_embd=64, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout: CPU and rbln draw different numbers
    return GPT2LMHeadModel(config).eval()


def test_compatible_shallow_copy_type_covers_cpu_and_rbln_only():
    cpu, dev = torch.ones(2), torch.ones(2, device="rbln")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, dev.double())
    # Unchanged for tensors rbln is not involved in, and for non-dense layouts.
    assert not torch._has_compatible_shallow_copy_type(cpu, torch.ones(2, device="meta"))
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(2, device="meta"))
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(2).to_sparse())


@pytest.mark.parametrize("convert", [lambda m: m.to("rbln"), lambda m: m.rbln(), lambda m: m.to(device="rbln:0")])
def test_to_rbln_keeps_parameter_objects_and_ties(convert):
    model = gpt2()
    before = list(model.parameters())
    assert model.transformer.wte.weight is model.lm_head.weight
    convert(model)
    after = list(model.parameters())
    assert len(after) == len(before) and all(a is b for a, b in zip(after, before))
    assert all(p.device.type == "rbln" for p in after)
    assert model.transformer.wte.weight is model.lm_head.weight
    # And back, and through dtype conversions.
    model.half()
    model.to(torch.float32)
    model.cpu()
    assert all(a is b for a, b in zip(model.parameters(), before))
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())
    assert model.transformer.wte.weight is model.lm_head.weight


def test_gradients_move_with_their_parameters():
    layer = torch.nn.Linear(3, 2)
    layer(torch.randn(4, 3)).sum().backward()
    weight, grad = layer.weight, layer.weight.grad.clone()
    layer.to("rbln")
    assert layer.weight is weight and layer.weight.grad.device.type == "rbln"
    torch.testing.assert_close(layer.weight.grad.cpu(), grad)
    # A backward after the move accumulates on the device into the moved gradient.
    layer(torch.randn(4, 3, device="rbln")).sum().backward()
    assert layer.weight.grad.device.type == "rbln"


def gpt2_adamw_losses(device, build_optimizer_first):
    model = gpt2()
    tokens = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(1))
    if build_optimizer_first:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model.to(device)
    else:
        model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    inputs = tokens.to(device)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(inputs, labels=inputs).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("build_optimizer_first", [False, True])
def test_tied_gpt2_trains_like_cpu(build_optimizer_first):
    expected, cpu_model = gpt2_adamw_losses("cpu", build_optimizer_first)
    with torch.rbln.explain() as ex:
        actual, dev_model = gpt2_adamw_losses("rbln", build_optimizer_first)
    assert expected[-1] < expected[0]
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    # The tied embedding got both its gradients: the trained weights agree with CPU's.
    torch.testing.assert_close(dev_model.transformer.wte.weight.cpu(), cpu_model.transformer.wte.weight,
                               rtol=1e-3, atol=1e-4)
    assert all(p.device.type == "rbln" for p in dev_model.parameters())
    assert {"aten::addmm", "aten::embedding_dense_backward"} <= set(ex.device_ops)


def test_optimizer_built_before_the_move_updates_the_device_parameters():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    model.to("rbln")
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for m, opt, dev in ((model, optimizer, "rbln"), (reference, reference_optimizer, "cpu")):
        opt.zero_grad()
        F.mse_loss(m(x.to(dev)), y.to(dev)).backward()
        opt.step()
    assert optimizer.param_groups[0]["params"][0] is model.weight
    torch.testing.assert_close(model.weight.cpu(), reference.weight)
    torch.testing.assert_close(model.bias.cpu(), reference.bias)
