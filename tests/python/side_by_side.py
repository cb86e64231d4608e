"""Helpers for tests that run a model on CPU and a copy with the same weights on rbln."""
from __future__ import annotations

import torch


def twin(make_model):
    """(cpu_model, rbln_model): two instances of make_model() with the CPU one's weights and buffers."""
    cpu_model = make_model()
    dev_model = make_model().rbln()
    dev_model.load_state_dict(cpu_model.state_dict())
    return cpu_model, dev_model


def train_side_by_side(make_model, make_optimizer, batches, loss_fn, train=True):
    """Trains a model on CPU and its twin on rbln, one step each per batch, interleaved.

    batches: CPU (inputs, target) pairs; loss_fn(model, inputs, target) -> scalar loss.
    Returns (losses, models, explanation): the per-step losses and models by device
    ("cpu", "rbln") and torch.rbln.explain()'s record of the whole run.
    """
    models = dict(zip(("cpu", "rbln"), twin(make_model)))
    for model in models.values():
        model.train(train)
    optimizers = {d: make_optimizer(m.parameters()) for d, m in models.items()}
    losses = {"cpu": [], "rbln": []}
    with torch.rbln.explain() as ex:
        for inputs, target in batches:
            for device in ("cpu", "rbln"):
                optimizers[device].zero_grad()
                loss = loss_fn(models[device], inputs.to(device), target.to(device))
                loss.backward()
                optimizers[device].step()
                losses[device].append(loss.item())
    return losses, models, ex


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, rtol: float, msg: str = ""):
    """Elementwise |actual - expected| <= rtol * max|expected|: for values computed through many
    summations, whose rounding error scales with the largest magnitude, not with each element."""
    actual = actual.detach().cpu()
    expected = expected.detach()
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=0, atol=rtol * scale + 1e-12, msg=lambda m: f"{msg}\n{m}")
