"""Renders the registry into generated/ and docs/supported_ops.md."""
from __future__ import annotations

import functools
import os
import re
import tempfile
import zlib

import jinja2
import torch
from torchgen.aoti.fallback_ops import inductor_fallback_ops
from torchgen.gen_aoti_c_shim import gen_declaration_and_definition, gen_static_dispatch_backend_call, get_fallback_op_name
from torchgen.model import DeviceCheckType, NativeFunction
from torchgen.model import Variant as CppVariant

from .registry import (DTYPE_GROUPS, DTYPES, FAMILIES, ROOT, Entry, Variant, is_operand, native_functions,
                       stricter_than_their_out_ops, unchecked_cpu_ops)

# Generated elementwise files: small (about 30 dtype cases each), so one edited entry recompiles little.
ELEMENTWISE_SHARDS = 64
FUNCTOR_HEADER = "kernels/elementwise/Functors.h"  # `<functor>_check` / `<functor>_out_check` argument checks
CHECKS_HEADER = "kernels/common/Checks.h"  # `<kernel>_check` functions the wrappers call before hand-written kernels
# What codegen reads from kernels/: CMakeLists.txt reruns codegen when one of them changes.
KERNEL_HEADERS = (FUNCTOR_HEADER, CHECKS_HEADER)


def _declared_names(root: str, path: str, pattern: str) -> set[str]:
    """The optional argument checks a header defines (a wrapper calls them when they exist)."""
    path = os.path.join(root, path)
    return set(re.findall(pattern, open(path).read())) if os.path.exists(path) else set()


def _fallback_call(v: Variant, fn: str) -> str:
    op = "at::_ops::" + v.func.func.name.unambiguous_name()
    return f"at::native::call_fallback_fn_symint<&rbln::{fn}, {op}>::call({', '.join(v.arg_names)})"


@functools.lru_cache(maxsize=None)
def _functor_checks(root: str) -> set[str]:
    return _declared_names(root, FUNCTOR_HEADER, r"\b(\w+_check)\s*\(")


def _elementwise_body(e: Entry, v: Variant, root: str) -> list[str]:
    args = v.func.func.arguments
    arity = FAMILIES[e.family]
    # Tensors are the operands; a Scalar is one only where the op has too few
    # tensors (add.Scalar, remainder.Scalar_Tensor), so elu_backward's Scalars stay parameters.
    tensors = [a for a in args.flat_non_out if str(a.type) == "Tensor"]
    operands = tensors[:arity] if len(tensors) >= arity else [a for a in args.flat_non_out if is_operand(a)][:arity]
    params = [a.name for a in args.flat_non_out if a not in operands]
    lines, refs = _device_check(v), []
    # A NoCheck op whose functional form is composite upstream (logical_and) allocates its result on self's
    # device: a CPU self beside device tensors fails CUDA's TensorIterator device check.
    if v.kind == "functional" and v.func.has_composite_explicit_autograd_kernel and len(tensors) >= 2:
        self_arg, other = tensors[0].name, tensors[1].name
        lines += [f"TORCH_CHECK(!{self_arg}.is_cpu(), \"Expected all tensors to be on the same device, but found at least two \"",
                  f"            \"devices, cpu and \", {other}.device(), \"!\");"]
    # A functor's argument check (`<functor>_check` in Functors.h), as CPU's meta functions check.
    if f"{e.functor}_check" in _functor_checks(root):
        lines.append(f"rbln::functors::{e.functor}_check({', '.join(a.name for a in args.flat_non_out)});")
    if v.kind == "out" and f"{e.functor}_out_check" in _functor_checks(root):  # a check of out= itself
        lines.append(f"rbln::functors::{e.functor}_out_check({', '.join(a.name for a in (*args.flat_non_out, args.out[0]))});")
    for a in operands:
        if str(a.type) == "Scalar":
            lines.append(f"const auto {a.name}_t = at::native::wrapped_scalar_tensor({a.name});")
            refs.append(f"{a.name}_t")
        else:
            refs.append(a.name)
    tensor = next(a.name for a in operands if str(a.type) != "Scalar")
    lines.append(f"const c10::OptionalDeviceGuard guard(at::device_of({tensor}));")
    if v.kind == "functional":
        lines.append("at::Tensor result;")
    else:
        target = args.out[0].name if v.kind == "out" else args.self_arg.argument.name
        lines.append(f"at::Tensor result = {target};")
    lines.append(f"auto iter = rbln::kernels::{e.family}_iter(result, {', '.join(refs)});")
    lines.append("switch (iter.common_dtype()) {")
    n = len(operands) + 1
    for d in e.dtypes:
        enum, cpp = DTYPES[d]
        functor = f"rbln::functors::{e.functor}<{cpp}>({', '.join(params)})"
        lines.append(f"  case at::ScalarType::{enum}: rbln::kernels::launch_elementwise<{cpp}, {n}>(iter, \"aten::{v.name}\", {functor}); break;")
    lines.append(f"  default: return {_fallback_call(v, 'fallback_dtype')};")
    lines.append("}")
    lines.append(f"RBLN_COUNT_DEVICE_OP(\"aten::{v.name}\");")
    lines.append("return iter.output();" if v.kind == "functional" else f"return {refs[0] if v.kind == 'inplace' else args.out[0].name};")
    return lines


# Tensor arguments whose dtype is fixed by the op (indices, masks, LU pivots,
# batch_norm's byte workspace, embedding bags' offsets and counts), not the data.
INDEX_ARGS = {"index", "indices", "mask", "condition", "repeats", "target", "targets", "pivots", "LU_pivots", "reserve",
              "offsets", "offset2bag", "bag_size", "maximum_indices", "block_table", "query_start_loc",
              "context_lens"}


# Ops whose tensors' devices differ by design: copies between devices (the backend hooks behind copy_ and
# .to) and nn.Module._apply's question whether a moved tensor's data may replace a Parameter's.
CROSS_DEVICE = {"_copy_from", "_copy_from_and_resize", "_has_compatible_shallow_copy_type"}


def _device_check(v: Variant) -> list[str]:
    """torchgen's device check for CUDA's wrappers: positional and out= tensors on one device, unless the
    op's kernel checks itself (`device_check: NoCheck`, as TensorIterator takes CPU 0-dim tensors)."""
    if v.func.device_check == DeviceCheckType.NoCheck or v.name in CROSS_DEVICE:
        return []
    args = [a for a in (*v.func.func.arguments.out, *v.func.func.arguments.flat_positional) if a.type.is_tensor_like()]
    if len(args) < 2:
        return []
    return ["std::optional<c10::Device> common_device;"] + [
        f"c10::impl::check_and_update_common_device(common_device, {a.name}, \"{v.cpp_name}\", \"{a.name}\");"
        for a in args]


@functools.lru_cache(maxsize=None)
def _kernel_checks(root: str) -> set[str]:
    return _declared_names(root, CHECKS_HEADER, r"\b(\w+_check)\s*\(")


def _guard_and_dtypes(e: Entry, v: Variant) -> list[str]:
    """The device guard, then the CPU fallback for a data tensor of a dtype the entry does not list."""
    tensors = [a for a in v.func.func.arguments.flat_all if str(a.type) == "Tensor"]
    lines = [f"const c10::OptionalDeviceGuard guard(at::device_of({tensors[0].name}));"] if tensors else []
    # Outputs are checked by the kernels (prepare_out), as their dtype may differ from the inputs'.
    outs = {a.name for a in v.func.func.arguments.out}
    data = [a.name for a in tensors if a.name not in INDEX_ARGS and a.name not in outs]
    if not data:  # a factory: out= is its only tensor, and its dtype is what the kernel computes in
        data = [a.name for a in tensors if a.name in outs]
    if e.dtypes != ["any"] and data:
        allowed = " || ".join(f"t == at::ScalarType::{DTYPES[d][0]}" for d in e.dtypes)
        ok = " && ".join(f"dtype_ok({n}.scalar_type())" for n in data)
        lines.append(f"const auto dtype_ok = [](at::ScalarType t) {{ return {allowed}; }};")
        if v.namespace == "aten":
            lines += [f"if (!({ok})) {{", f"  return {_fallback_call(v, 'fallback_dtype')};", "}"]
        else:  # rbln's own operator has no CPU kernel to fall back to: CUDA's error for a dtype it lacks
            lines += [f"for (const auto t : {{{', '.join(f'{n}.scalar_type()' for n in data)}}})",
                      f"  TORCH_CHECK_NOT_IMPLEMENTED(dtype_ok(t), \"\\\"{v.qualified_name}\\\" not implemented for '\", t, \"'\");"]
    return lines + [f"RBLN_COUNT_DEVICE_OP(\"{v.qualified_name}\");"]


def _kernel_body(e: Entry, v: Variant, root: str) -> list[str]:
    lines = _device_check(v)
    if not e.structured and f"{e.kernel_name}_check" in _kernel_checks(root):  # CPU's argument checks, first
        lines.append(f"rbln::checks::{e.kernel_name}_check({', '.join(v.arg_names)});")
    lines += _guard_and_dtypes(e, v)
    args = list(v.arg_names)
    if e.structured and v.kind == "functional":  # the out= kernel allocates undefined results, one per return
        n = len(v.func.func.returns)
        results = ["result"] if n == 1 else [f"result{i}" for i in range(n)]
        lines.append(f"at::Tensor {', '.join(results)};")
        args += results
    elif e.structured and v.kind == "inplace":
        args.append(v.func.func.arguments.self_arg.argument.name)
    lines.append(f"return {e.qualified_kernel}({', '.join(args)});")
    return lines


# Schema types a dispatcher signature passes as non-owning references: a library op's launch runs later, so
# its closure keeps copies (rbln::kernels::own in kernels/library/Library.h) and passes them back as references (ref).
BORROWED = {"int[]", "SymInt[]", "int[]?", "SymInt[]?", "float[]?", "str", "str?"}


def _library_body(e: Entry, v: Variant) -> list[str]:
    """CPU's kernel of the op in the device's op library (kernels/library/Library.h): its tensors as CPU views of device
    memory inside a launch, its other arguments copied into the launch."""
    inputs, captures, call = [], [], []
    for a in v.func.func.arguments.flat_all:
        t = str(a.type)
        if t == "Tensor":
            call.append(f"in[{len(inputs)}]")
            inputs.append(a.name)
        elif t == "Tensor?":
            call.append(f"rbln::kernels::optional(in[{len(inputs)}])")
            inputs.append(f"{a.name}.value_or(at::Tensor())")
        elif re.sub(r"\[\d*\]", "[]", t) in BORROWED:
            captures.append(f"{a.name} = rbln::kernels::own({a.name})")
            call.append(f"rbln::kernels::ref({a.name})")
        else:
            captures.append(a.name)
            call.append(a.name)
    op = "at::_ops::" + v.func.func.name.unambiguous_name()
    n = len(v.func.func.returns)
    if str(v.func.func.returns[0].type) == "Tensor[]":
        result = "r"
    else:
        result = "r[0]" if n == 1 else f"std::make_tuple({', '.join(f'r[{i}]' for i in range(n))})"
    name = f'"aten::{v.name}"'
    # Looked up once per process: whether the meta function sizes the results (`synced: true` says it must not).
    sizing = "false" if e.synced else f"rbln::kernels::has_meta_function({name})"
    return _device_check(v) + _guard_and_dtypes(e, v) + [
        f"static const bool sized_by_meta = {sizing};",
        f"const auto r = rbln::kernels::library_op({name}, sized_by_meta, {{{', '.join(inputs)}}},",
        f"    {'rbln::kernels::in_float32(' if e.upcast else ''}[{', '.join(captures)}](const std::vector<at::Tensor>& in) {{",
        f"      return rbln::kernels::results({op}::call({', '.join(call)}));",
        f"    }}{')' if e.upcast else ''});",
        f"return {result};"]


def _body(e: Entry, v: Variant, root: str) -> list[str]:
    # A check CPU's kernel needs and does not make (`<op>_check` in Checks.h), before a library or the CPU runs it.
    check = f"{v.func.func.name.name}_check"
    op_check = [f"rbln::checks::{check}({', '.join(v.arg_names)});"] if check in _kernel_checks(root) else []
    if e.strategy == "library":
        return op_check + _library_body(e, v)
    if e.strategy == "fallback":
        if e.kernel:  # a hand-written wrapper that runs the CPU and counts the fallback itself
            return _device_check(v) + [f"return {e.qualified_kernel}({', '.join(v.arg_names)});"]
        return op_check + [f"return {_fallback_call(v, 'fallback_listed')};"]
    if e.strategy == "composite":  # rbln's own composite: differentiable ops, no device work of its own
        return [f"return {e.qualified_kernel}({', '.join(v.arg_names)});"]
    if e.family:
        return _elementwise_body(e, v, root)
    return _kernel_body(e, v, root)


def _write_rule(e: Entry) -> str:
    """How CPU's in-place and out= kernels of the op accept a result (runtime/compiled/RBLNCompiledOps.h, WriteRule)."""
    out = next((v.func for v in e.variants if v.kind == "out"), None)
    if out is None or not out.structured:
        return "kMeta"
    return "kCastable" if out.structured_inherits == "TensorIteratorBase" else "kExact"


def _compiled_registrations(entries: list[Entry]) -> list[tuple[str, str, str, str, str, str]]:
    """(overload, functional op, its overload name, dtypes, positions of the data tensors whose dtype is checked,
    write rule) for every variant of a `strategy: compile` entry."""
    rows = []
    for e in entries:
        if e.strategy != "compile":
            continue
        name, _, overload = e.func.partition(".")
        dtypes = ", ".join(f"at::ScalarType::{DTYPES[d][0]}" for d in e.dtypes)
        functional = next(v for v in e.variants if v.kind == "functional").func.func.arguments.flat_all
        data = ", ".join(str(i) for i, a in enumerate(functional)
                         if a.type.is_tensor_like() and str(a.type) != "Tensor[]" and a.name not in INDEX_ARGS)
        rows += [(v.name, f"aten::{name}", overload, dtypes, data, _write_rule(e)) for v in e.variants]
    return rows


def _base(overload: str) -> str:
    return overload.split(".")[0].rstrip("_")


# AOTInductor's C shims for CPU: the extern kernels an rbln package calls as rbln ops (python/torch_rbln/_inductor/cpp_wrapper.py).
CPU_SHIM_HEADER = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "inductor", "aoti_torch",
                               "generated", "c_shim_cpu.h")
AOTI_SHIM_SHARDS = 4  # about 40 ops each: each file compiles in well under a minute


def aoti_shims() -> dict[str, NativeFunction]:
    """The ops of torchgen's fallback list CPU has a C shim for, by shim name."""
    cpu = set(re.findall(r"\baoti_torch_cpu_(\w+)\(", open(CPU_SHIM_HEADER).read()))
    return {f.func.name.unambiguous_name(): f for f in native_functions()
            if get_fallback_op_name(f) in inductor_fallback_ops and f.func.name.unambiguous_name() in cpu}


def _dispatcher_call(f: NativeFunction) -> str:
    """torchgen's call for the C++ API's `at::<op>`, or the operator's own for a method-only op: `at::<op>` does not
    exist, and without SymInts its C++ and dispatcher signatures are the same."""
    if CppVariant.function in f.variants or f.func.has_symint():
        return gen_static_dispatch_backend_call(f)
    return f"at::_ops::{f.func.name.unambiguous_name()}::call"


def _aoti_shim_files(env: jinja2.Environment) -> dict[str, str]:
    """CPU's signatures (and versions, `_v2`), calling `at::<op>` (the dispatcher) where CPU's call `at::cpu::<op>`."""
    shards: dict[int, list[NativeFunction]] = {i: [] for i in range(AOTI_SHIM_SHARDS)}
    for name, f in sorted(aoti_shims().items()):
        shards[zlib.crc32(name.encode()) % AOTI_SHIM_SHARDS].append(f)
    return {f"generated/c_shim_rbln_{i}.cpp": env.get_template("c_shim_rbln.cpp.j2").render(
        headers=sorted({f.root_name for f in fs}),
        definitions=[gen_declaration_and_definition(f.func, "rbln", _dispatcher_call(f),
                                                    inductor_fallback_ops[get_fallback_op_name(f)])[1].strip()
                     for f in fs])
        for i, fs in shards.items()}


def shard(e: Entry) -> int:
    """An elementwise entry's shard, by a stable hash of its functor: adding or editing one entry rewrites (and
    rebuilds) only its own shard, not every shard after it, and the entries of one functor (add.Tensor,
    add.Scalar, ...) share its kernel instantiations in one file instead of compiling them once per file."""
    return zlib.crc32((e.functor or e.func).encode()) % ELEMENTWISE_SHARDS


def render(entries: list[Entry], root: str = ROOT) -> dict[str, str]:
    """Returns {relative path: contents} for every generated file."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(root, "templates")),
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    registered = [e for e in entries if e.strategy in ("kernel", "fallback", "library") or e.own_composite]
    shards = {"generated/RegisterRBLN.cpp": [e for e in registered if not e.family]}
    for i in range(ELEMENTWISE_SHARDS):
        shards[f"generated/RegisterRBLN_elementwise_{i}.cpp"] = [e for e in registered if e.family and shard(e) == i]
    out = {}
    template = env.get_template("RegisterRBLN.cpp.j2")
    overloads = {o for e in entries if e.strategy in ("kernel", "fallback", "library", "compile") for o in e.overloads}
    for path, group in shards.items():
        wrappers = [(v, _body(e, v, root)) for e in group for v in e.variants]
        headers = sorted({v.func.root_name for e in group for v in e.variants if v.namespace == "aten"})
        main = path == "generated/RegisterRBLN.cpp"  # not an elementwise shard (which may be empty)
        autograd = [v for e in group if e.own_composite for v in e.variants]
        out[path] = template.render(wrappers=wrappers, headers=headers, elementwise=not main, autograd=autograd,
                                    unchecked=unchecked_cpu_ops() if main else [], compiled=[],
                                    checked_fallbacks=[o for o in stricter_than_their_out_ops() if o not in overloads]
                                    if main else [])
    # Compiled ops register boxed kernels only: their own small file, so a new entry rebuilds nothing else.
    out["generated/RegisterRBLN_compiled.cpp"] = template.render(
        wrappers=[], headers=[], elementwise=False, autograd=[], unchecked=[], compiled=_compiled_registrations(entries),
        checked_fallbacks=[])
    namespaces: dict[str, list[str]] = {}
    for e in registered:
        if e.kernel_decl and e.kernel_decl not in namespaces.setdefault(e.kernel_namespace, []):
            namespaces[e.kernel_namespace].append(e.kernel_decl)
    out.update(_aoti_shim_files(env))
    out["generated/RBLNNativeFunctions.h"] = env.get_template("RBLNNativeFunctions.h.j2").render(
        namespaces=sorted(namespaces.items()))
    groups = {tuple(v): k for k, v in DTYPE_GROUPS.items()}
    out["docs/supported_ops.md"] = env.get_template("supported_ops.md.j2").render(
        entries=sorted(entries, key=lambda e: e.func), dtypes=lambda e: groups.get(tuple(e.dtypes), ", ".join(e.dtypes)),
        counts={s: sum(e.strategy == s for e in entries) for s in ("kernel", "library", "compile", "composite", "fallback")})
    tested = [e for e in entries if e.strategy in ("kernel", "library", "compile", "composite") and e.opinfo and e.dtypes != ["any"]]
    # An OpInfo may reach any overload of its op (add(x, 2) is add.Tensor too).
    related: dict[str, set[str]] = {}
    for e in registered + [e for e in entries if e.strategy == "compile"]:
        for o in e.overloads:
            related.setdefault(_base(o), set()).add(o)
    # ... or any overload of an entry that names the same OpInfo (torch.unique reaches _unique2 or unique_dim).
    by_opinfo: dict[str, set[str]] = {}
    for e in registered + [e for e in entries if e.strategy == "compile"]:
        for name in e.opinfo:
            by_opinfo.setdefault(name, set()).update(e.overloads)
    cases = [(e, sorted(related.get(_base(e.func), set(e.overloads)).union(*(by_opinfo.get(n, ()) for n in e.opinfo))))
             for e in tested]
    out["generated/test_ops_generated.py"] = env.get_template("test_ops_generated.py.j2").render(cases=cases)
    return out


def stale(files: dict[str, str], root: str) -> list[str]:
    """Generated sources the build would compile that codegen no longer writes (a shard count lowered)."""
    gen = os.path.join(root, "generated")
    present = {f"generated/{n}" for n in os.listdir(gen)} if os.path.isdir(gen) else set()
    return sorted(p for p in present if p.endswith((".cpp", ".h")) and p not in files)


def write(files: dict[str, str], root: str) -> list[str]:
    """Writes atomically, only files whose content changed, and removes stale ones; returns those."""
    changed = []
    for rel in stale(files, root):
        os.remove(os.path.join(root, rel))
        changed.append(rel)
    for rel, text in files.items():
        path = os.path.join(root, rel)
        if os.path.exists(path) and open(path).read() == text:
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".gen-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes files private
        os.replace(tmp, path)
        changed.append(rel)
    return changed
