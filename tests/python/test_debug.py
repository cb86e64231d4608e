"""torch_rbln.debug: compare mode, the non-finite origin, dumps and their offline comparison.

The emulator's kernels agree with CPU, so divergences are made on purpose: inject_fault swaps one
op's rbln kernel for a wrong one for a block, and each test asserts that the tool names that op, the
module and the line, and that the device's own kernel is back afterwards."""
from __future__ import annotations

import inspect
import json
import os
import runpy
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from torch_rbln import debug
from torch_rbln.debug import DivergenceError, NonFiniteError, add_to_first, inject_fault

HERE = os.path.abspath(__file__)


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up_proj = nn.Linear(8, 16)
        self.down_proj = nn.Linear(16, 8, bias=False)  # F.linear without a bias: aten::mm on 2-d inputs

    def forward(self, x):
        h = torch.relu(self.up_proj(x))
        return self.down_proj(h)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net().rbln()


def test_inject_fault_is_scoped_and_restores_the_device_kernel():
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with inject_fault("aten::mm", add_to_first(0.5)):
        wrong = (a.rbln() @ b.rbln()).cpu()
    expected = a @ b
    assert wrong[0, 0].item() == pytest.approx(expected[0, 0].item() + 0.5, abs=1e-5)
    torch.testing.assert_close(wrong.flatten()[1:], expected.flatten()[1:])
    with torch.rbln.explain() as ex:
        right = (a.rbln() @ b.rbln()).cpu()
    torch.testing.assert_close(right, expected)
    assert ex.device_ops.get("aten::mm", 0) == 1 and not ex.fallback_ops  # the device's own kernel again


def test_compare_names_the_op_module_line_and_location_of_a_wrong_kernel(net, tmp_path):
    x = torch.randn(3, 8).rbln()
    with inject_fault(torch.ops.aten.mm.default, add_to_first(0.25)):
        with pytest.raises(DivergenceError) as info, debug.compare(repro_dir=str(tmp_path)):
            net(x)
    d = info.value.divergence
    assert d.op == "aten::mm.default" and d.result == "output 0"
    assert d.where["module"] == "layers.0.down_proj" and d.where["phase"] == "forward"
    assert d.where["stack"][0].startswith(f"{HERE}:{line_of(Block.forward, 'self.down_proj(h)')} in forward")
    assert d.figures["index"] == (0, 0) and d.figures["count"] == 1
    assert d.figures["max_abs"] == pytest.approx(0.25, abs=1e-5)
    text = str(info.value)
    assert "aten::mm.default" in text and "layers.0.down_proj (forward)" in text and "reproducer: python" in text

    # The reproducer replays the saved inputs: without the fault rbln matches (exit 0) ...
    proc = subprocess.run([sys.executable, d.reproducer], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "results match" in proc.stdout, proc.stdout + proc.stderr
    # ... with it, the script finds the divergence (exit 1).
    with inject_fault("aten::mm", add_to_first(0.25)), pytest.raises(SystemExit) as exit_info:
        runpy.run_path(d.reproducer, run_name="__main__")
    assert exit_info.value.code == 1
    saved = torch.load(tmp_path / "aten_mm_default.pt", weights_only=False)
    assert saved["op"] == "aten::mm.default" and saved["args"][0].shape == (3, 16)


def test_compare_clean_training_step_has_no_divergence_and_the_same_losses(net):
    twin = Net().rbln()
    twin.load_state_dict(net.state_dict())
    x, y = torch.randn(6, 8).rbln(), torch.randn(6, 4).rbln()
    losses = {}
    for name, model, checking in (("plain", net, False), ("compared", twin, True)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[name] = []
        for _ in range(2):
            with debug.compare(mode="all") if checking else torch.enable_grad() as c:
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
            losses[name].append(loss.item())
            if checking:
                assert c.report.compared > 20 and c.divergences == []
    assert losses["plain"] == losses["compared"]


@pytest.mark.filterwarnings("ignore:Error detected in AddmmBackward0")  # anomaly mode's, as the divergence raises
def test_compare_backward_divergence_names_the_module_and_forward_line():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4)).rbln()  # forward: addmm; backward: mm
    x = torch.randn(3, 8, requires_grad=True).rbln()
    with inject_fault("aten::mm", add_to_first(0.5)):
        with pytest.raises(DivergenceError) as info, debug.compare(backward_stacks=True):
            out = model(x).sum()
            out.backward()
    d = info.value.divergence
    assert d.op == "aten::mm.default" and d.where["phase"] == "backward"
    assert d.where["module"] == "2"  # the first mm of backward: the last Linear's gradients
    here = line_of(test_compare_backward_divergence_names_the_module_and_forward_line, "out = model(x)")
    assert d.where["stack"][0] == "backward of AddmmBackward0"
    assert d.where["stack"][1].startswith(f"forward: {HERE}:{here} in "), d.where["stack"]


def test_compare_in_place_out_and_factory_ops():
    a, b = torch.randn(300), torch.randn(300)
    with inject_fault("aten::add_.Tensor"), pytest.raises(DivergenceError) as info, debug.compare():
        a.rbln().add_(b.rbln())
    assert info.value.divergence.op == "aten::add_.Tensor"
    assert info.value.divergence.result == "argument written 0" and info.value.divergence.figures["index"] == (0,)

    @debug.compare()  # as a decorator
    def add_into(out):
        torch.add(a.rbln(), b.rbln(), out=out)

    with inject_fault("aten::add.out"), pytest.raises(DivergenceError) as info:
        add_into(torch.empty(300).rbln())
    assert info.value.divergence.op == "aten::add.out" and info.value.divergence.result == "argument written 0"
    add_into(torch.empty(300).rbln())  # the right kernel again: no divergence
    with inject_fault("aten::full"), pytest.raises(DivergenceError) as info, debug.compare():  # a factory
        torch.full((3, 4), 2.0, device="rbln")
    assert info.value.divergence.op == "aten::full.default" and info.value.divergence.figures["expected"] == 2.0


def test_compare_random_ops_by_statistics_or_skips_them_with_a_reason():
    with debug.compare() as c:
        torch.randn(4000, device="rbln")
        torch.nn.functional.dropout(torch.ones(2000, device="rbln"), 0.3)
    assert c.divergences == [] and "aten::randn.default" not in c.report.skipped
    with debug.compare() as c:
        torch.randn(10, device="rbln")
    assert "fewer than" in c.report.skipped["aten::randn.default"]
    with inject_fault("aten::normal_", lambda t: t.mul_(3)), pytest.raises(DivergenceError) as info:
        with debug.compare():
            torch.empty(4000, device="rbln").normal_()
    assert info.value.divergence.op == "aten::normal_.default" and "std" in info.value.divergence.figures["statistics"]
    # Dropout with p == 0 (attention's dropout_p=0.0) is not random: compared element by element.
    with inject_fault("aten::native_dropout"), pytest.raises(DivergenceError) as info, debug.compare():
        torch.ops.aten.native_dropout(torch.ones(4000, device="rbln"), 0.0, True)
    assert info.value.divergence.figures["index"] == (0,)


def test_compare_all_mode_ranks_every_divergence_and_tolerances_are_overridable(net, capsys):
    x = torch.randn(3, 8).rbln()
    with inject_fault("aten::relu", add_to_first(1e-3)), inject_fault("aten::mm", add_to_first(2.0)):
        with debug.compare(mode="all") as c:
            net(x)
        table = capsys.readouterr().err
        assert {(d.op, d.where["module"]) for d in c.divergences} == {
            ("aten::relu.default", "layers.0"), ("aten::relu.default", "layers.1"),
            ("aten::mm.default", "layers.0.down_proj"), ("aten::mm.default", "layers.1.down_proj")}
        rows = table.splitlines()[2:]
        assert "aten::mm.default" in rows[0] and "aten::relu.default" in rows[-1], table
        with debug.compare(mode="all", tolerances={"aten::mm": (3.0, 0.0), torch.float32: (1e-2, 0.0)}) as c:
            net(x)
        assert c.divergences == []


def test_compare_float64_reference_on_a_clean_model(net):
    with debug.compare(dtype=torch.float64) as c:
        net(torch.randn(3, 8).rbln()).sum().backward()
    assert c.divergences == [] and c.report.compared > 20


def test_compare_checks_convolution_and_its_backward_against_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 3, groups=2)).rbln()
    with debug.compare() as c:
        model(torch.randn(2, 3, 8, 8).rbln()).sum().backward()
    assert {"aten::convolution.default", "aten::convolution_backward.default"} <= c.report.ops
    assert c.divergences == [] and c.report.skipped == {}


def test_compare_on_a_hugging_face_model_names_its_module_paths_and_checks_its_training_step():
    from test_models import tiny_llama

    torch.manual_seed(0)
    model = tiny_llama().rbln()
    ids = torch.randint(3, 128, (2, 8)).rbln()
    with torch.no_grad(), inject_fault("aten::silu"), pytest.raises(DivergenceError) as info, debug.compare():
        model(ids)
    d = info.value.divergence
    assert d.op == "aten::silu.default" and d.where["module"] == "model.layers.0.mlp.act_fn"
    assert any("modeling_llama.py" in line for line in d.where["stack"]) and d.where["phase"] == "forward"
    # A clean training step: nothing diverges or is skipped, same loss and gradients. Attention runs the
    # backends' entry point, which CPU lacks: compared with CPU's scaled_dot_product_attention and its backward.
    sdpa = "aten::_scaled_dot_product_fused_attention_overrideable"
    plain = model(ids, labels=ids).loss
    plain.backward()
    expected = [p.grad.cpu() for p in model.parameters()]
    model.zero_grad()
    with debug.compare(mode="all") as c:
        loss = model(ids, labels=ids).loss
        loss.backward()
    assert c.divergences == [] and c.report.skipped == {} and c.report.compared > 200
    assert {sdpa + ".default", sdpa + "_backward.default"} <= c.report.ops
    assert loss.item() == plain.item()
    for grad, want in zip((p.grad.cpu() for p in model.parameters()), expected):
        torch.testing.assert_close(grad, want, rtol=0, atol=0)


# ---------------------------------------------------------------- non-finite origin


@pytest.mark.parametrize("dtype, value, weight", [(torch.float16, 100.0, 300.0), (torch.bfloat16, 1e30, 1e10)])
def test_nonfinite_origin_is_the_layer_that_overflows(dtype, value, weight):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 4))
    with torch.no_grad():
        model[0].weight.fill_(0.1)  # 1.6 * value each
        model[2].weight.fill_(weight)  # 16 * 1.6 * value * weight: past the dtype's largest value
    model = model.to(dtype).rbln()
    x = torch.full((2, 16), value, dtype=dtype).rbln()
    with pytest.raises(NonFiniteError) as info, debug.detect_nonfinite():
        model(x)
    e = info.value
    assert e.op == "aten::addmm.default" and e.where["module"] == "2" and not e.from_input
    assert e.where["phase"] == "forward" and e.where["stack"][0].startswith(HERE)
    model[2].weight.data.fill_(1e-3)
    with debug.detect_nonfinite():  # finite now: no error
        model(x)


def test_nonfinite_input_from_outside_is_reported_as_such():
    x = torch.tensor([1.0, float("nan")]).rbln()
    with pytest.raises(NonFiniteError) as info, debug.detect_nonfinite():
        x * 2
    assert info.value.from_input and info.value.op == "aten::mul.Tensor"


def test_nonfinite_in_backward_and_skipped_ops():
    class Root(nn.Module):
        def forward(self, x):
            return x.sqrt()

    model = nn.Sequential(nn.Linear(4, 4), Root())
    x = torch.zeros(2, 4).rbln()
    model = model.rbln()
    with torch.no_grad():
        model[0].weight.zero_(), model[0].bias.zero_()
    with pytest.raises(NonFiniteError) as info, debug.detect_nonfinite(check_every=1):
        model(x).sum().backward()  # d sqrt(x) / dx at 0 is inf
    assert info.value.where["phase"] == "backward" and info.value.where["module"] == "1"
    # An op told to write an infinity is no origin; ops in `skip` are not checked.
    mask = torch.tensor([0.0, 1.0, 1.0, 1.0]).rbln()
    with debug.detect_nonfinite():
        mask.masked_fill(mask == 0, float("-inf")).softmax(-1)
    with pytest.raises(NonFiniteError, match="aten::log.default"), debug.detect_nonfinite():
        (mask - 1).log()
    with debug.detect_nonfinite(skip={"aten::log"}):
        (mask - 1).log()


# ---------------------------------------------------------------- dumps


class TiedTwoHeads(nn.Module):
    """Tied weights, and outputs as a tuple and a dict."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.block = Block()
        self.lm_head = nn.Linear(8, 10, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        h = self.block(self.embed(ids))
        return {"logits": self.lm_head(h), "pair": (h, h.sum())}


def dump_run(device, directory, fault=None):
    torch.manual_seed(0)
    model = TiedTwoHeads().to(device)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]]).to(device)
    with inject_fault(fault) if fault else torch.enable_grad(), debug.dump_step(model, directory):
        out = model(ids)
        (out["logits"].square().mean() + out["pair"][1]).backward()


def test_dumps_and_the_command_line_comparison(tmp_path, capsys):
    dump_run("cpu", tmp_path / "cpu")
    dump_run("rbln", tmp_path / "rbln")
    dump_run("rbln", tmp_path / "faulty", fault="aten::relu")
    index = json.loads((tmp_path / "rbln" / "index.json").read_text())
    assert index["tied"] == {"lm_head.weight": "embed.weight"} and index["device"] == "rbln:0"
    kinds = {(e["module"], e["kind"]) for e in index["entries"]}
    assert {("block.down_proj", "forward"), ("TiedTwoHeads", "forward"), ("block", "backward"),
            ("(parameters)", "parameter_grad")} <= kinds
    model_entry = next(e for e in index["entries"] if e["module"] == "TiedTwoHeads" and e["kind"] == "forward")
    assert set(model_entry["tensors"]) == {"input[0]", "output['logits']", "output['pair'][0]",
                                           "output['pair'][1]"}
    assert model_entry["tensors"]["output['logits']"]["shape"] == [2, 3, 10]

    # The command line in-process when the dumps match, in a subprocess (its exit status) when they do not.
    from torch_rbln.debug.__main__ import main

    assert main(["compare", str(tmp_path / "rbln"), str(tmp_path / "cpu")]) == 0
    assert capsys.readouterr().out.strip() == "no divergence"
    wrong = subprocess.run([sys.executable, "-m", "torch_rbln.debug", "compare", str(tmp_path / "faulty"),
                            str(tmp_path / "cpu")], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    # relu is no module: the first to see its wrong result is down_proj, as its input
    assert wrong.stdout.startswith("first diverging module: block.down_proj (forward), input"), wrong.stdout
    assert main(["compare", str(tmp_path / "faulty"), str(tmp_path / "cpu"), "--atol", "2"]) == 0  # within 2
    (tmp_path / "faulty" / "index.json").write_text(json.dumps({**index, "entries": index["entries"][:1]}))
    assert main(["compare", str(tmp_path / "cpu"), str(tmp_path / "faulty")]) == 1  # modules missing in B
    assert "not in" in capsys.readouterr().out


def test_dump_forward_only(tmp_path):
    model = Net().rbln()
    out = debug.dump(model, (torch.randn(2, 8).rbln(),), str(tmp_path))
    index = json.loads((tmp_path / "index.json").read_text())
    assert out.shape == (2, 4) and [e["module"] for e in index["entries"]][-1] == "Net"
    assert all(e["kind"] == "forward" for e in index["entries"])
