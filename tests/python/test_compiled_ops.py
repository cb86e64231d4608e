"""ops.yaml's `compile` strategy: ops run as plans Inductor compiled from their decompositions.

The generated per-op tests (generated/test_ops_generated.py) check every compile entry against CPU
over its OpInfo samples; these check the strategy itself: the cache (one compile for many shapes, a
second process compiling nothing, the bound), the variants' semantics, errors and accounting.
"""
import json
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch_rbln


def renorm(x):
    return torch.renorm(x, 2, 0, 1.0)


def test_shapes_of_one_rank_cost_one_compile():
    with torch.rbln.explain() as ex:
        for shape in [(4, 6), (5, 7), (3, 9), (8, 2), (10, 11)]:
            x = torch.randn(shape, dtype=torch.float64)
            torch.testing.assert_close(torch.renorm(x.to("rbln"), 2, 0, 0.7).cpu(), torch.renorm(x, 2, 0, 0.7))
    assert ex.compiled_ops == {"aten::renorm": 5}
    assert ex.device_ops["aten::renorm"] == 5
    assert sum(ex.compiles.values()) <= 1
    assert not ex.fallback_ops


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (1, 5), (3, 1), (2, 0)])
def test_edge_sizes(shape):
    x = torch.randn(shape)
    with torch.rbln.explain() as ex:
        actual = renorm(x.to("rbln")).cpu()
    torch.testing.assert_close(actual, renorm(x))
    assert ex.compiled_ops == {"aten::renorm": 1} and not ex.fallback_ops


@pytest.mark.parametrize("view", [lambda t: t.t(), lambda t: t[1:, 2:], lambda t: t[::2, ::3],
                                  lambda t: t.expand(2, 6, 8)[1]], ids=["transposed", "offset", "strided", "expanded"])
def test_layouts_and_offsets(view):
    base = torch.randn(6, 8)
    with torch.rbln.explain() as ex:
        actual = renorm(view(base.to("rbln"))).cpu()
    torch.testing.assert_close(actual, renorm(view(base)))
    assert ex.compiled_ops == {"aten::renorm": 1} and not ex.fallback_ops


def test_inplace_and_out_follow_cpu():
    x = torch.randn(4, 5)
    dev = x.to("rbln")
    with torch.rbln.explain() as ex:
        dev.renorm_(2, 1, 0.5)
        out = torch.empty(0, device="rbln")
        returned = torch.renorm(x.to("rbln"), 2, 1, 0.5, out=out)
    assert returned is out
    torch.testing.assert_close(dev.cpu(), x.clone().renorm_(2, 1, 0.5))
    torch.testing.assert_close(out.cpu(), torch.renorm(x, 2, 1, 0.5))
    assert set(ex.compiled_ops) == {"aten::renorm_", "aten::renorm.out"} and not ex.fallback_ops
    # out= dtype rules as CPU's (renorm's meta function: the out dtype must be the result's).
    for device in ("cpu", "rbln"):
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got long int instead"):
            torch.renorm(x.to(device), 2, 1, 0.5, out=torch.empty(4, 5, dtype=torch.long, device=device))


def test_bad_input_gets_cpus_error_and_leaves_the_device_usable():
    x = torch.randn(3, 4)
    errors = []
    for device in ("cpu", "rbln"):
        with pytest.raises(IndexError) as info:
            torch.renorm(x.to(device), 2, 5, 1.0)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    a, b = torch.randint(0, 9, (3, 4)), torch.randint(0, 9, (5, 4))
    for device in ("cpu", "rbln"):
        with pytest.raises(RuntimeError, match="must match the size"):
            torch.bitwise_left_shift(a.to(device), b.to(device))
    torch.testing.assert_close(renorm(x.to("rbln")).cpu(), renorm(x))


def test_wrong_device_is_cudas_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.renorm(torch.randn(2, 3, device="rbln"), 2, 0, 1.0, out=torch.empty(2, 3))


def test_dtype_outside_the_entry_falls_back_counted():
    x = torch.arange(6).reshape(2, 3)  # renorm lists floating dtypes only
    with torch.rbln.explain() as ex:
        with pytest.raises(RuntimeError):  # as on CPU: renorm is not implemented for Long
            torch.renorm(x.to("rbln"), 2, 0, 1.0)
    assert ex.fallback_reasons == {"aten::renorm": {"dtype not supported on the device": 1}}


def test_an_argument_no_plan_takes_falls_back_with_compile_failed():
    x = torch.randn(3, 4)
    for device in ("cpu", "rbln"):
        with torch.rbln.explain() as ex, pytest.raises(RuntimeError, match="renorm: p must be real-valued"):
            torch.renorm(x.to(device), complex(2, 0), 0, 1.0)  # a complex Scalar: CPU's error, through the CPU
    (reason,) = ex.fallback_reasons["aten::renorm"]
    assert reason.startswith("compile failed: an argument no compiled plan takes")


def test_threads_share_the_cache():
    x = torch.randn(64, 33)
    expected = renorm(x)
    dev = x.to("rbln")
    errors = []

    def work():
        try:
            for _ in range(200):
                torch.testing.assert_close(renorm(dev).cpu(), expected)
        except Exception as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_cache_is_bounded_least_recently_used_out():
    info = torch.rbln.compiled_op_cache_info()
    try:
        torch.rbln.set_compiled_op_cache_limits(max_plans=1)
        x = torch.randn(3, 4)
        for p in (1.0, 2.0, 3.0):  # three keys: a plan each
            torch.testing.assert_close(torch.renorm(x.to("rbln"), p, 0, 1.0).cpu(), torch.renorm(x, p, 0, 1.0))
        now = torch.rbln.compiled_op_cache_info()
        assert now["plans"] == 1 and now["evictions"] > info["evictions"]
        assert now["bytes"] <= info["max_bytes"]
    finally:
        torch.rbln.set_compiled_op_cache_limits(max_plans=info["max_plans"])


SECOND_PROCESS = r"""
import json, torch, torch_rbln
x = torch.randn(7, 5)
with torch.rbln.explain() as ex:
    y = torch.renorm(x.to("rbln"), 2, 0, 0.25)
assert torch.allclose(y.cpu(), torch.renorm(x, 2, 0, 0.25))
print(json.dumps({"compiles": ex.compiles, "compiled_ops": ex.compiled_ops, "info": torch.rbln.compiled_op_cache_info()}))
"""


def test_a_second_process_loads_plans_from_disk(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}  # torch_rbln set it from ours
    env["TORCH_RBLN_CACHE_DIR"] = str(tmp_path)
    runs = [subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["compiles"] == {"aten::renorm": 1}
    assert second["compiles"] == {} and second["info"]["disk_loads"] >= 1
    assert second["compiled_ops"] == {"aten::renorm": 1}


# Compile entries without an OpInfo of their own (ops.yaml `opinfo: null`): their callers, against CPU.
CALLERS = {
    "aten::_weight_norm_interface": lambda v, g: torch._weight_norm(v, g, 0),
    "aten::col2im": lambda cols, _: torch.nn.functional.fold(cols, (4, 5), (2, 2), stride=1),
    "aten::floor_divide.Scalar": lambda a, _: torch.ops.aten.floor_divide.Scalar(a, 3),
    "aten::im2col": lambda x, _: torch.nn.functional.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    "aten::logspace": lambda x, _: torch.logspace(-2, 3, 7, base=2.0, device=x.device),
}
INPUTS = {
    "aten::_weight_norm_interface": lambda: (torch.randn(6, 4, 3), torch.randn(6, 1, 1)),
    "aten::col2im": lambda: (torch.randn(2, 12, 12), None),
    "aten::floor_divide.Scalar": lambda: (torch.randint(-20, 20, (5, 6)), None),
    "aten::im2col": lambda: (torch.randn(2, 3, 7, 8), None),
    "aten::logspace": lambda: (torch.empty(0), None),
}


@pytest.mark.parametrize("op", sorted(CALLERS))
def test_entries_without_an_opinfo(op):
    cpu_args = INPUTS[op]()
    dev_args = [a.to("rbln") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    expected = CALLERS[op](*cpu_args)
    with torch.rbln.explain() as ex:
        actual = CALLERS[op](*dev_args)
    torch.testing.assert_close(actual.cpu() if isinstance(actual, torch.Tensor) else [t.cpu() for t in actual], expected)
    assert op in ex.compiled_ops and not ex.fallback_ops


def test_torch_compile_with_cpp_wrapper_says_it_is_not_supported():
    # The registered C++ wrapper makes plans for the runtime; a torch.compile graph gets a clear error, not a plan.
    f = torch.compile(lambda x: (x * 2).sin(), options={"cpp_wrapper": True})
    with pytest.raises(Exception, match="cpp_wrapper=True is not supported on rbln"):
        f(torch.randn(4, device="rbln"))


WAV2VEC2 = r"""
import json, warnings, torch, torch_rbln
from transformers import Wav2Vec2Config, Wav2Vec2Model
warnings.simplefilter("ignore")
torch.manual_seed(0)
config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                        num_conv_pos_embedding_groups=4)
model = Wav2Vec2Model(config).eval()
audio = torch.randn(1, 800)
with torch.no_grad():
    expected = model(audio).last_hidden_state
    model.to("rbln")
    with torch.rbln.explain() as ex:
        actual = model(audio.to("rbln")).last_hidden_state
torch.testing.assert_close(actual.cpu(), expected, atol=1e-4, rtol=1e-4)
print(json.dumps({"compiled_ops": ex.compiled_ops, "fallback_ops": ex.fallback_ops}))
"""


def test_hugging_face_wav2vec2_runs_its_weight_norm_compiled():
    # Wav2Vec2's positional convolution is weight-normalized: _weight_norm_interface, a compiled op.
    r = subprocess.run([sys.executable, "-c", WAV2VEC2], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["compiled_ops"].get("aten::_weight_norm_interface", 0) >= 1
    assert result["fallback_ops"] == {}
