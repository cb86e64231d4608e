"""AOTInductor packages on rbln (docs/deployment.md): compiled once, loaded and run with no compile."""
import copy
import json
import os
import re
import zipfile

import pytest
import torch
import torch_rbln  # noqa: F401
from torch._dynamo.utils import counters
from torch_rbln._inductor.cpp_wrapper import has_rbln_shim

BATCH = torch.export.Dim("batch", min=1, max=64)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """One compile for the module: an rbln program with a dynamic batch, packaged."""
    path = str(tmp_path_factory.mktemp("aoti") / "model.pt2")
    x = torch.randn(3, 8, device="rbln")
    ep = torch.export.export(_model().to("rbln"), (x,), dynamic_shapes=({0: BATCH},))
    return torch._inductor.aoti_compile_and_package(ep, package_path=path)


@pytest.fixture(scope="module")
def cpu_package(tmp_path_factory):
    """The same program compiled for the CPU."""
    path = str(tmp_path_factory.mktemp("aoti_cpu") / "model.pt2")
    ep = torch.export.export(_model(), (torch.randn(3, 8),), dynamic_shapes=({0: BATCH},))
    return torch._inductor.aoti_compile_and_package(ep, package_path=path)


def _compiles():
    return sum(counters["inductor"].values()), torch.rbln.compile_stats().graphs_generated


def test_package_says_rbln(package):
    with zipfile.ZipFile(package) as archive:
        metadata = [n for n in archive.namelist() if n.endswith("wrapper_metadata.json")]
        assert json.loads(archive.read(metadata[0]))["AOTI_DEVICE_KEY"] == "rbln"


def _load_and_run(package, x):
    """The package loaded and called on x moved to rbln:0, with no compile: (result, explain() report)."""
    before = _compiles()
    loaded = torch._inductor.aoti_load_package(package)
    with torch.rbln.explain() as report:
        y = loaded(x.to("rbln"))
        torch.rbln.synchronize()
    assert _compiles() == before
    assert y.device == torch.device("rbln:0")
    return y, report


@pytest.mark.parametrize("batch", [3, 7])
def test_load_runs_on_rbln_with_no_compile(package, batch):
    model, x = _model(), torch.randn(batch, 8)
    y, report = _load_and_run(package, x)
    assert not report.fallback_ops and "aten::addmm.out" in " ".join(report.device_ops)
    with torch.no_grad():
        torch.testing.assert_close(y.cpu(), model(x))
        torch.testing.assert_close(y, model.to("rbln")(x.to("rbln")))


def test_device_index_places_weights(package):
    if torch.rbln.device_count() < 2:
        pytest.skip("one rbln device")
    loaded = torch._inductor.aoti_load_package(package, device_index=1)
    x = torch.randn(2, 8)
    y = loaded(x.to("rbln:1"))
    assert y.device == torch.device("rbln:1")
    with torch.no_grad():
        torch.testing.assert_close(y.cpu(), _model()(x))


def test_bad_inputs_and_packages_give_clear_errors(package, tmp_path):
    loaded = torch._inductor.aoti_load_package(package)
    with pytest.raises(RuntimeError, match="same device"):  # the dispatcher's error, as on CUDA
        loaded(torch.randn(2, 8))
    with pytest.raises(RuntimeError):
        loaded(torch.randn(2, 9, device="rbln"))
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(open(package, "rb").read()[:4096])
    with pytest.raises(Exception):
        torch._inductor.aoti_load_package(str(truncated))
    x = torch.randn(2, 8)  # the device still works
    with torch.no_grad():
        torch.testing.assert_close(loaded(x.to("rbln")).cpu(), _model()(x))


def test_packages_refuse_inputs_on_another_device(package, cpu_package, monkeypatch):
    x = torch.randn(2, 8)
    # Upstream's CPU package checks no device by default and reads its inputs' memory as host memory: for this program
    # the extern kernel's device check stops it; a CPU device index is refused at load.
    cpu_loaded = torch._inductor.aoti_load_package(cpu_package)
    with pytest.raises(RuntimeError, match="Expected out tensor to have device rbln:0, but got cpu"):
        cpu_loaded(x.to("rbln"))
    with pytest.raises(RuntimeError, match="Incorrect device passed to aoti_runner_cpu"):
        torch._inductor.aoti_load_package(cpu_package, device_index=0)
    # With AOTI_RUNTIME_CHECK_INPUTS (read at a loaded package's first call) each package checks its inputs'
    # device type first: a CPU package refuses rbln inputs, an rbln package CPU inputs.
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")
    with pytest.raises(RuntimeError, match=r"unmatched device type, expected: 0+\(cpu\), but got: 20"):
        torch._inductor.aoti_load_package(cpu_package)(x.to("rbln"))
    with pytest.raises(RuntimeError, match=r"unmatched device type, expected: (20)+\(rbln\), but got: 0"):
        torch._inductor.aoti_load_package(package)(x)
    with torch.no_grad():  # each runs on its own device
        torch.testing.assert_close(cpu_loaded(x), _model()(x))
        torch.testing.assert_close(torch._inductor.aoti_load_package(package)(x.to("rbln")).cpu(), _model()(x))


def test_package_runs_in_another_process(package, run_python):
    result = run_python(f"""
        from torch._dynamo.utils import counters
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        x = torch.randn(5, 8)
        y = torch._inductor.aoti_load_package({package!r})(x.to("rbln"))
        print(json.dumps({{"device": str(y.device), "error": (y.cpu() - model(x)).abs().max().item(),
                          "compiles": sum(counters["inductor"].values())}}))
    """)
    assert result == {"device": "rbln:0", "error": pytest.approx(0, abs=1e-5), "compiles": 0}


def _doubled(fqns):
    """The model with the package's weights (fqns) changed; a bias of 8 values or fewer is compiled into a
    kernel (upstream's Inductor inlines small constants), so it is not a weight of the package."""
    model = _model()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in fqns:
                param.mul_(2).add_(0.5)
    return model


@pytest.mark.parametrize("device", ["rbln", "cpu"])
def test_swapped_weights_are_used_with_no_compile(package, device):
    loaded = torch._inductor.aoti_load_package(package)
    fqns = set(loaded.get_constant_fqns())
    assert fqns == {"0.weight", "0.bias", "2.weight"}
    new, x = _doubled(fqns), torch.randn(5, 8)
    before = _compiles()
    loaded.load_constants({k: v.to(device) for k, v in new.state_dict().items() if k in fqns}, check_full_update=True)
    y = loaded(x.to("rbln"))
    assert _compiles() == before and y.device == torch.device("rbln:0")
    with torch.no_grad():
        torch.testing.assert_close(y.cpu(), new(x))
    loaded.load_constants({k: v for k, v in _model().state_dict().items() if k in fqns}, check_full_update=True)
    with torch.no_grad():  # swapped back, as CPU tensors
        torch.testing.assert_close(loaded(x.to("rbln")).cpu(), _model()(x))


def test_user_managed_weights_are_cpu_tensors(package):
    loaded = torch._inductor.aoti_load_package(package)
    fqns = set(loaded.get_constant_fqns())
    new, x = _doubled(fqns), torch.randn(5, 8)
    weights = {k: v.detach().clone() for k, v in new.state_dict().items() if k in fqns}  # the package uses these
    loaded.load_constants(weights, check_full_update=True, user_managed=True)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x.to("rbln")).cpu(), new(x))
    with pytest.raises(RuntimeError, match="user-managed weights are CPU tensors"):
        loaded.load_constants({k: v.to("rbln") for k, v in weights.items()}, check_full_update=True, user_managed=True)


def _allocations(kind="allocated"):
    torch.rbln.synchronize()
    return torch.rbln.memory_stats()[f"allocation.all.{kind}"]


def test_weights_live_on_the_device_from_load_to_unload(package):
    before = _allocations()
    loaded = torch._inductor.aoti_load_package(package)
    weights = len(loaded.get_constant_fqns())
    assert _allocations() - before == weights  # one device copy per weight
    x = torch.randn(5, 8).to("rbln")
    first = _allocations()
    loaded(x)
    second = _allocations()
    loaded(x)
    assert _allocations() - second == second - first  # the first call copies no weight
    freed = _allocations("freed")
    del loaded
    assert _allocations("freed") - freed == weights


def test_every_cpu_c_shim_has_an_rbln_twin():
    header = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "inductor", "aoti_torch",
                          "generated", "c_shim_cpu.h")
    shims = set(re.findall(r"\baoti_torch_cpu_(\w+)\(", open(header).read()))
    assert {"mm_out", "convolution", "_scaled_dot_product_fused_attention_overrideable"} <= shims
    assert [s for s in sorted(shims) if not has_rbln_shim(s)] == []
    assert not has_rbln_shim("_efficient_attention_forward")  # CUDA's only: such an extern kernel is refused


class _CausalSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 8).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


TRANSFORMERS = {
    "encoder_layer": (lambda: torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                                batch_first=True, dropout=0), (2, 10, 64)),
    "causal_sdpa": (_CausalSelfAttention, (2, 10, 32)),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_attention_runs_on_rbln_through_generated_shims(name, tmp_path):
    """SDPA stays an extern kernel (no C shim was hand-written for it): the package calls rbln's fused kernel."""
    make, shape = TRANSFORMERS[name]
    torch.manual_seed(0)
    model, x = make().eval(), torch.randn(shape)
    ep = torch.export.export(copy.deepcopy(model).to("rbln"), (x.to("rbln"),))
    package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "model.pt2"))
    y, report = _load_and_run(package, x)
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in report.device_ops
    with torch.no_grad():
        torch.testing.assert_close(y.cpu(), model(x))
