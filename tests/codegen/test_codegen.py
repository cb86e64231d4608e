"""The registry and generator: validation errors, determinism, adding an op."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from codegen.gen import render
from codegen.registry import ROOT, OpsYamlError, load

OPS = os.path.join(ROOT, "ops.yaml")


def write_ops(tmp_path, text):
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def codegen(*args):
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=ROOT, capture_output=True, text=True)


def test_committed_generated_files_are_up_to_date():
    result = codegen("--check")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("- {func: frobnicate, kernel: unary, functor: abs}\n", "ops.yaml:1: unknown op or overload 'frobnicate'"),
        ("- {func: add.Tensorr, kernel: binary, functor: add}\n", "overloads of 'add': add.Scalar"),
        ("- {func: add.Tensor, kernel: turbo add}\n", "ops.yaml:1: add.Tensor: 'kernel' must be a C++ name"),
        ("- {func: add.Tensor, kernel: binary, functor: 1plus}\n", "'functor' must be a C++ name"),
        ("- {func: add.Tensor, kernel: add_out, functor: add}\n", "'functor' only applies to a kernel family"),
        ("- {func: mm.out, kernel: mm_out, structured: true}\n", "'structured' needs a functional overload"),
        ("- {func: abs, kernel: unary, functor: abs, dtypes: [float32, float7]}\n", "unknown dtype 'float7'"),
        ("- {func: abs, kernel: unary, functor: abs}\n- {func: abs.out, kernel: index_select}\n",
         "ops.yaml:2: duplicate entry: abs.out already registered by the entry at line 1"),
        ("- {func: mm, strategy: composite}\n", "mm has no composite implementation upstream"),
        ("- {func: renorm.out, strategy: compile}\n", "strategy 'compile' takes the functional overload"),
        ("- {func: renorm, strategy: compile, kernel: renorm}\n", "'kernel'/'functor' only apply to strategy 'kernel'"),
        ("- {func: mm, strategy: fast}\n", "unknown strategy 'fast'"),
        ("- {func: _histogramdd_from_bin_tensors, strategy: library}\n", "no tensor-list arguments"),
        ("- {func: linalg_eig.out, strategy: library}\n", "strategy 'library' takes a functional overload"),
        ("- {func: mm, kernel: mm, synced: true}\n", "'synced' only applies to strategy 'library'"),
        ("- {func: mm, kernel: mm, upcast: true}\n", "'upcast' only applies to strategy 'library'"),
        ("- {kernel: mm}\n", "ops.yaml:1: missing 'func'"),
        ("- {func: mm, kernel: mm, colour: red}\n", "unknown key(s) ['colour']"),
        ("- {func: mm, kernel: mm\n", "ops.yaml:2: YAML syntax error"),
        ("- {func: abs, kernel: unary}\n", "family 'unary' needs a 'functor'"),
        ("- {func: int_repr, kernel: int_repr, key: QuantizedCUDA}\n", "'key' is one of PrivateUse1, QuantizedPrivateUse1"),
        ("- {func: int_repr, strategy: fallback, key: QuantizedPrivateUse1}\n", "other keys than PrivateUse1 take strategy"),
        ("- {func: view, kernel: a, key: QuantizedPrivateUse1}\n- {func: view, kernel: b, key: QuantizedPrivateUse1}\n",
         "ops.yaml:2: duplicate entry: view already registered by the entry at line 1"),
        ("- {func: mylib::op, schema: '(Tensor x) -> Tensor', kernel: op}\n", "'mylib::op': an operator of ops.yaml's own is 'rbln::"),
        ("- {func: rbln::op, kernel: op}\n", "rbln::op: an 'rbln::' operator needs a 'schema'"),
        ("- {func: rbln::op, schema: '(Tensor x -> Tensor', kernel: op}\n", "rbln::op: schema '(Tensor x -> Tensor' does not parse"),
        ("- {func: rbln::op, schema: '(Tensor x) -> Tensor', strategy: library}\n", "takes strategy 'kernel' with a hand-written kernel"),
        ("- {func: rbln::op, schema: '(Tensor x) -> Tensor', kernel: unary, functor: abs}\n", "takes strategy 'kernel' with a hand-written"),
        ("- {func: abs, schema: '(Tensor x) -> Tensor', kernel: abs}\n", "abs: 'schema' is for 'rbln::' operators"),
    ],
)
def test_malformed_entries_are_rejected_with_file_and_line(tmp_path, text, message):
    with pytest.raises(OpsYamlError) as error:
        load(write_ops(tmp_path, text))
    assert message in str(error.value)


def test_invalid_registry_writes_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = codegen("--ops", write_ops(tmp_path, "- {func: nope}\n"), "--out", str(out))
    assert result.returncode == 1
    assert "ops.yaml:1: unknown op or overload 'nope'" in result.stderr
    assert list(out.iterdir()) == []


def test_kernel_declarations_are_generated_from_the_dispatcher_signatures(tmp_path):
    # The compiler checks each kernel against these (no hand-written list of signatures).
    files = render(load(write_ops(tmp_path, """\
        - {func: mm, kernel: mm_out, structured: true}
        - {func: copy_, kernel: rbln::copy_, dtypes: any}
        - {func: trace, kernel: trace}
        """)))
    header = files["generated/RBLNNativeFunctions.h"]
    assert "namespace rbln {\n\nat::Tensor & copy_(at::Tensor & self, const at::Tensor & src, bool non_blocking);" in header
    assert "at::Tensor & mm_out(const at::Tensor & self, const at::Tensor & mat2, at::Tensor & out);" in header
    assert "at::Tensor trace(const at::Tensor & self);" in header
    assert header.index("namespace rbln::kernels {") < header.index("mm_out")
    source = files["generated/RegisterRBLN.cpp"]
    assert "return rbln::copy_(self, src, non_blocking);" in source
    for overload in ("mm", "mm.out"):  # structured: the out= kernel serves both
        assert f'm.impl("{overload}", TORCH_FN(' in source
    assert "return rbln::kernels::mm_out(self, mat2, result);" in source
    assert not os.path.exists(os.path.join(ROOT, "kernels", "Kernels.h"))


def test_structured_ops_with_several_results_pass_one_undefined_result_each(tmp_path):
    files = render(load(write_ops(tmp_path, """\
        - {func: max.dim, kernel: max_dim_max, structured: true}
        """)))
    header = files["generated/RBLNNativeFunctions.h"]
    assert ("::std::tuple<at::Tensor &,at::Tensor &> max_dim_max(const at::Tensor & self, int64_t dim, bool keepdim, "
            "at::Tensor & max, at::Tensor & max_values);") in header
    source = files["generated/RegisterRBLN.cpp"]
    for overload in ("max.dim", "max.dim_max"):
        assert f'm.impl("{overload}", TORCH_FN(' in source
    assert "at::Tensor result0, result1;\n  return rbln::kernels::max_dim_max(self, dim, keepdim, result0, result1);" in source
    assert "return rbln::kernels::max_dim_max(self, dim, keepdim, max, max_values);" in source


def test_ops_stricter_than_their_out_overload_keep_their_device_check(tmp_path):
    # clamp_min.Tensor checks devices as CUDA's wrapper does; clamp_min.Tensor_out (what PyTorch's composite
    # would run) takes a CPU 0-dim tensor. Unlisted, they go to the counted fallback under their own name.
    source = render(load(write_ops(tmp_path, "- {func: mm, kernel: mm_out, structured: true}\n")))["generated/RegisterRBLN.cpp"]
    for op in ("clamp_min.Tensor", "clamp_min_.Tensor", "clamp_max.Tensor", "clamp_max_.Tensor"):
        assert f'm.impl("{op}", torch::CppFunction::makeFromBoxedFunction<&rbln::fallback_unlisted>());' in source
    listed = render(load(write_ops(tmp_path, "- {func: clamp_min.Tensor, strategy: fallback}\n")))["generated/RegisterRBLN.cpp"]
    assert listed.count('m.impl("clamp_min.Tensor"') == 1 and "TORCH_FN(wrapper_clamp_min_Tensor)" in listed


def test_library_entries_pass_their_arguments_to_the_op_in_a_launch(tmp_path):
    # Arguments the dispatcher passes by reference are copied into the closure (the launch runs later);
    # optional tensors travel as undefined ones; an op with no meta function is sized after it runs.
    source = render(load(write_ops(tmp_path, """\
        - {func: linalg_lstsq, strategy: library, dtypes: [float32]}
        - {func: segment_reduce, strategy: library, dtypes: [float32]}
        - {func: _embedding_bag, strategy: library, synced: true, dtypes: [float32]}
        """)))["generated/RegisterRBLN.cpp"]
    assert ('static const bool sized_by_meta = rbln::kernels::has_meta_function("aten::linalg_lstsq");\n'
            '  const auto r = rbln::kernels::library_op("aten::linalg_lstsq", sized_by_meta, {self, b},\n'
            '      [rcond, driver = rbln::kernels::own(driver)](const std::vector<at::Tensor>& in) {\n'
            '        return rbln::kernels::results(at::_ops::linalg_lstsq::call(in[0], in[1], rcond, '
            'rbln::kernels::ref(driver)));') in source
    assert "return std::make_tuple(r[0], r[1], r[2], r[3]);" in source
    assert ('{data, lengths.value_or(at::Tensor()), indices.value_or(at::Tensor()), offsets.value_or(at::Tensor())}'
            in source)
    assert "at::_ops::segment_reduce::call(in[0], rbln::kernels::ref(reduce), rbln::kernels::optional(in[1])" in source
    assert 'static const bool sized_by_meta = false;\n  const auto r = rbln::kernels::library_op("aten::_embedding_bag", ' in source
    assert 'm.impl("linalg_lstsq", TORCH_FN(wrapper_linalg_lstsq));' in source
    upcast = render(load(write_ops(tmp_path, "- {func: multi_margin_loss, strategy: library, upcast: true, "
                                             "dtypes: [float32, float16]}\n")))["generated/RegisterRBLN.cpp"]
    assert "rbln::kernels::in_float32([p, margin, reduction](const std::vector<at::Tensor>& in) {" in upcast
    assert "in_float32" not in source


def test_an_own_composite_registers_for_the_device_and_its_autograd_key(tmp_path):
    # A composite entry with a kernel replaces PyTorch's CompositeImplicitAutograd kernel on rbln: its wrapper
    # calls the kernel and registers twice, so autograd runs through the differentiable ops it calls.
    source = render(load(write_ops(tmp_path, """\
        - {func: fft_rfft, strategy: composite, kernel: fft_rfft, dtypes: [float32, float16]}
        - {func: fft_fft, strategy: composite, dtypes: [float32]}
        """)))["generated/RegisterRBLN.cpp"]
    assert "return rbln::kernels::fft_rfft(self, n, dim, norm);" in source
    autograd = source[source.index("TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m)"):]
    assert source.count('m.impl("fft_rfft", TORCH_FN(wrapper_fft_rfft));') == 2
    assert 'm.impl("fft_rfft", TORCH_FN(wrapper_fft_rfft));' in autograd and '"fft_fft"' not in source
    plain = render(load(write_ops(tmp_path, "- {func: fft_fft, strategy: composite, dtypes: [float32]}\n")))
    assert "AutogradPrivateUse1" not in plain["generated/RegisterRBLN.cpp"]


def test_a_keyed_entry_registers_for_its_dispatch_key_only(tmp_path):
    # `key: QuantizedPrivateUse1`: the quantized tensors of the device; the same op may have a dense entry too.
    source = render(load(write_ops(tmp_path, """\
        - {func: view, kernel: rbln::view, dtypes: any}
        - {func: view, kernel: view_quantized, key: QuantizedPrivateUse1, dtypes: any}
        """)))["generated/RegisterRBLN.cpp"]
    dense = source[source.index("TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)"):]
    dense = dense[:dense.index("}")]
    quantized = source[source.index("TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m)"):]
    assert 'm.impl("view", TORCH_FN(wrapper_view));' in dense and "QuantizedPrivateUse1_view" not in dense
    assert 'm.impl("view", TORCH_FN(wrapper_QuantizedPrivateUse1_view));' in quantized
    assert "return rbln::kernels::view_quantized(self, size);" in source


def test_an_own_operator_is_defined_and_registered_in_the_rbln_namespace(tmp_path):
    # `func: rbln::<name>` with a `schema`: torch.ops.rbln.<name>, defined beside its kernel; a dtype it does not
    # list raises (no CPU kernel to fall back to); tensors named as indices are not dtype-checked.
    files = render(load(write_ops(tmp_path, """\
        - {func: rbln::scaled_sum, schema: "(Tensor self, Tensor index, float scale=1.0) -> Tensor", kernel: scaled_sum, dtypes: floating}
        """)))
    source = files["generated/RegisterRBLN.cpp"]
    assert 'TORCH_LIBRARY_FRAGMENT(rbln, m) {\n  m.def("scaled_sum(Tensor self, Tensor index, float scale=1.0) -> Tensor");' in source
    own = source[source.index("TORCH_LIBRARY_IMPL(rbln, PrivateUse1, m)"):]
    assert 'm.impl("scaled_sum", TORCH_FN(wrapper_rbln_scaled_sum));' in own
    aten = source[source.index("TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)"):]
    assert "scaled_sum" not in aten[:aten.index("}")]
    assert "for (const auto t : {self.scalar_type()})" in source and "not implemented for '" in source
    assert 'RBLN_COUNT_DEVICE_OP("rbln::scaled_sum");' in source and "ATen/ops/scaled_sum" not in source
    assert "at::Tensor scaled_sum(const at::Tensor & self, const at::Tensor & index, double scale);" in \
        files["generated/RBLNNativeFunctions.h"]
    assert "| `rbln::scaled_sum` |" in files["docs/supported_ops.md"]


def test_generation_is_deterministic():
    assert render(load(OPS)) == render(load(OPS))


def test_one_yaml_entry_adds_registration_docs_row_and_tests(tmp_path):
    base = open(OPS).read()
    files = render(load(write_ops(tmp_path, base + "- {func: fix, kernel: unary, functor: trunc, dtypes: floating}\n")))
    sources = "".join(text for path, text in files.items() if path.endswith(".cpp"))
    for overload in ("fix", "fix_", "fix.out"):
        assert f'm.impl("{overload}", TORCH_FN(' in sources
    assert "rbln::functors::trunc<float>()" in sources
    assert "| `fix` | fix, fix_, fix.out | floating | kernel | unary/trunc |" in files["docs/supported_ops.md"]
    assert '("fix", ["fix", "fix.out", "fix_"], ["fix"]' in files["generated/test_ops_generated.py"]


def test_one_compile_entry_registers_every_variant_in_the_compiled_file_only(tmp_path):
    base = render(load(OPS))
    files = render(load(write_ops(tmp_path, open(OPS).read() + "- {func: special_xlogy, strategy: compile, dtypes: floating}\n")))
    changed = sorted(p for p in files if files[p] != base.get(p))
    assert changed == ["docs/supported_ops.md", "generated/RegisterRBLN_compiled.cpp", "generated/test_ops_generated.py"]
    compiled = files["generated/RegisterRBLN_compiled.cpp"]
    for overload in ("special_xlogy", "special_xlogy.out"):  # functional and out=; the schema has no in-place form
        assert f'm.impl("{overload}", rbln::compiled_op("aten::special_xlogy", "", {{at::ScalarType::Float' in compiled
    assert "| `special_xlogy` | special_xlogy, special_xlogy.out | floating | compile |" in files["docs/supported_ops.md"]


def test_one_elementwise_entry_changes_at_most_two_generated_files(tmp_path):
    # Shards are chosen by a stable hash of the op, so a new entry rewrites its own shard (and the
    # generated tests), not every shard after it; the build then recompiles one shard.
    base_dir, edited_dir = tmp_path / "base", tmp_path / "edited"
    edited = write_ops(tmp_path, open(OPS).read() + "- {func: fix, kernel: unary, functor: trunc, dtypes: floating}\n")
    for ops, out in ((OPS, base_dir), (edited, edited_dir)):
        result = codegen("--ops", ops, "--out", str(out))
        assert result.returncode == 0, result.stderr
    changed = sorted(str(p.relative_to(edited_dir)) for p in edited_dir.rglob("*")
                     if p.is_file() and p.read_text() != (base_dir / p.relative_to(edited_dir)).read_text())
    generated = [p for p in changed if p.startswith("generated/")]
    assert len(generated) <= 2, changed
    assert [p for p in generated if p.endswith(".cpp")] == [p for p in generated if "RegisterRBLN_elementwise_" in p]
    assert len([p for p in generated if p.endswith(".cpp")]) == 1, changed


def test_aoti_shims_have_cpu_shims_signatures():
    """An rbln package calls `aoti_torch_rbln_<op>` through CPU's declaration (cpp_wrapper.py's RBLN_SHIM): one
    generated definition per CPU shim, with its exact signature."""
    from codegen.gen import CPU_SHIM_HEADER

    cpu = re.findall(r"AOTITorchError aoti_torch_cpu_(\w+\(.*?\));", open(CPU_SHIM_HEADER).read(), re.S)
    files = {rel: text for rel, text in render(load(OPS)).items() if rel.startswith("generated/c_shim_rbln_")}
    generated = re.findall(r"^AOTITorchError aoti_torch_rbln_(\w+\(.*?\)) \{", "".join(files.values()), re.M | re.S)
    assert len(cpu) > 100 and sorted(generated) == sorted(cpu)
