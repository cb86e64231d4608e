"""Reads and validates ops.yaml against PyTorch's own native_functions.yaml.

Every problem is reported as `ops.yaml:LINE: what is wrong`; nothing is
generated unless the whole file is valid.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import torchgen
import yaml
from torchgen import local
from torchgen.api.types import DispatcherSignature
from torchgen.gen import parse_native_yaml
from torchgen.model import (BaseTy, BaseType, DeviceCheckType, DispatchKey, Location, NativeFunction, OptionalType,
                            SchemaKind)
from torchgen.native_function_generation import pre_group_native_functions

# dtype name in ops.yaml -> (c10::ScalarType enumerator, C++ type)
DTYPES = {
    "float32": ("Float", "float"),
    "float16": ("Half", "at::Half"),
    "bfloat16": ("BFloat16", "at::BFloat16"),
    "float64": ("Double", "double"),
    "int8": ("Char", "int8_t"),
    "uint8": ("Byte", "uint8_t"),
    "int16": ("Short", "int16_t"),
    "int32": ("Int", "int32_t"),
    "int64": ("Long", "int64_t"),
    "uint16": ("UInt16", "uint16_t"),
    "uint32": ("UInt32", "uint32_t"),
    "uint64": ("UInt64", "uint64_t"),
    "bool": ("Bool", "bool"),
    "complex64": ("ComplexFloat", "c10::complex<float>"),
    "complex128": ("ComplexDouble", "c10::complex<double>"),
    "complex32": ("ComplexHalf", "c10::complex<c10::Half>"),  # CUDA's; CPU has few kernels for it
    "float8_e4m3fn": ("Float8_e4m3fn", "c10::Float8_e4m3fn"),
    "float8_e5m2": ("Float8_e5m2", "c10::Float8_e5m2"),
    "float8_e4m3fnuz": ("Float8_e4m3fnuz", "c10::Float8_e4m3fnuz"),
    "float8_e5m2fnuz": ("Float8_e5m2fnuz", "c10::Float8_e5m2fnuz"),
    "float8_e8m0fnu": ("Float8_e8m0fnu", "c10::Float8_e8m0fnu"),
}
DTYPE_GROUPS = {
    "floating": ["float32", "float16", "bfloat16", "float64"],
    "integral": ["int32", "int64"],
    # CPU's smaller integer types (image and int8 pipelines): on the device for the core arithmetic,
    # comparison and bitwise entries, which compute in the type itself as CPU does (wrapping), and for the
    # hand-written kernels (reductions, indexing, sorting, ...), whose dtype dispatch already covers them.
    "small_integral": ["int8", "uint8", "int16"],
    # The bare unsigned types: CPU moves, compares, multiplies, masks, sums and sorts them, and little else.
    "unsigned": ["uint16", "uint32", "uint64"],
    "all": ["float32", "float16", "bfloat16", "float64", "int32", "int64", "bool"],
    "complex": ["complex64", "complex128"],
    "float8": ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"],
}
DTYPE_GROUPS["numeric"] = DTYPE_GROUPS["floating"] + DTYPE_GROUPS["integral"]

# Elementwise families: name -> number of operands. Each has a C++ iterator
# builder rbln::kernels::<family>_iter(out, operands...) in kernels/elementwise/Elementwise.h.
FAMILIES = {
    "unary": 1,
    "unary_real": 1,
    "unary_float_real": 1,
    "unary_float": 1,
    "logical": 1,
    "threshold": 1,
    "binary": 2,
    "binary_float": 2,
    "compare": 2,
    "ternary": 3,
}
STRATEGIES = ("kernel", "composite", "fallback", "compile", "library")
KEYS = {"func", "strategy", "kernel", "functor", "dtypes", "notes", "opinfo", "tolerance", "structured", "synced",
        "upcast", "key", "schema"}
# rbln's own operators (torch.ops.rbln.*): an entry `func: rbln::name` with its `schema`, which the generated code
# defines (TORCH_LIBRARY_FRAGMENT) and registers its kernel for; native_functions.yaml has no such op.
CUSTOM_NAMESPACE = "rbln"
# The dispatch keys an entry registers for: rbln's dense tensors, and its quantized tensors (quint8, qint8, qint32
# on the device dispatch to QuantizedPrivateUse1, as CUDA's to QuantizedCUDA).
DISPATCH_KEYS = ("PrivateUse1", "QuantizedPrivateUse1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A hand-written kernel's C++ namespace unless its `kernel:` is qualified (`rbln::copy_`). The generator
# declares every kernel in generated/RBLNNativeFunctions.h with its dispatcher signature, so the compiler
# checks that a kernel exists and has its entry's signature.
KERNEL_NAMESPACE = "rbln::kernels"
CPP_NAME = re.compile(r"(?:[A-Za-z_]\w*::)*[A-Za-z_]\w*")


class OpsYamlError(Exception):
    pass


@dataclass
class Variant:
    """One registered overload of an entry."""

    name: str  # e.g. "add.out"
    kind: str  # functional | inplace | out
    func: NativeFunction
    cpp_name: str
    decl: str
    arg_names: list[str]
    key: str = "PrivateUse1"  # the dispatch key it registers for (the entry's `key`)
    namespace: str = "aten"  # the operator's (CUSTOM_NAMESPACE for rbln's own)

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}::{self.name}"


@dataclass
class Entry:
    func: str
    line: int
    strategy: str
    kernel: str | None
    functor: str | None
    dtypes: list[str]
    notes: str
    opinfo: list[str]
    variants: list[Variant] = field(default_factory=list)
    tolerance: dict[str, list[float]] = field(default_factory=dict)  # dtype -> [atol, rtol] in the generated tests
    structured: bool = False  # kernel is the out= overload's; functional and in-place call it
    synced: bool = False  # a library op sized by its results (the host waits), not by its meta function
    upcast: bool = False  # a library op computing float16/bfloat16 in float32 (its CPU kernel has neither)
    kernel_decl: str | None = None  # the hand-written kernel's declaration (unqualified name), for the header
    key: str = "PrivateUse1"  # the dispatch key of the tensors it serves (DISPATCH_KEYS)

    @property
    def own_composite(self) -> bool:
        """A composite op with rbln's own kernel: registered for the device and its autograd key, it calls
        differentiable ops (as PyTorch's CompositeImplicitAutograd kernel does) under rbln's rules."""
        return self.strategy == "composite" and bool(self.kernel)

    @property
    def kernel_namespace(self) -> str:
        return self.kernel.rpartition("::")[0] or KERNEL_NAMESPACE

    @property
    def kernel_name(self) -> str:
        return self.kernel.rpartition("::")[2]

    @property
    def qualified_kernel(self) -> str:
        return f"{self.kernel_namespace}::{self.kernel_name}"

    @property
    def family(self) -> str | None:
        return self.kernel if self.kernel in FAMILIES else None

    @property
    def overloads(self) -> list[str]:
        return [v.name for v in self.variants]


class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where PyYAML has it, as torchgen
    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)
        mapping["__line__"] = node.start_mark.line + 1
        return mapping


@functools.lru_cache(maxsize=None)
def _parsed():
    d = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    return parse_native_yaml(os.path.join(d, "native_functions.yaml"), os.path.join(d, "tags.yaml"))


def native_functions() -> list[NativeFunction]:
    return _parsed().native_functions


def unchecked_cpu_ops() -> list[str]:
    """Ops with a CPU kernel (so the CPU fallback may run them) whose kernels check devices themselves
    (`device_check: NoCheck`); torchgen's wrappers check every other op's tensors share one device."""
    parsed = _parsed()
    cpu = {str(n) for n in parsed.backend_indices[DispatchKey.CPU].index}
    return sorted(str(f.func.name) for f in parsed.native_functions
                  if f.device_check == DeviceCheckType.NoCheck
                  and (str(f.func.name) in cpu or str(f.structured_delegate) in cpu))


def stricter_than_their_out_ops() -> list[str]:
    """Structured functional and in-place ops with CUDA's default device check (every tensor on one device)
    whose out= overload checks in its kernel instead (`device_check: NoCheck`, a CPU 0-dim tensor taken).
    Without an rbln kernel PyTorch's composite runs the out= overload, and the counted fallback of that would
    take a CPU 0-dim `min` that CUDA's clamp_min.Tensor refuses. The generated registrations send these ops to
    the fallback themselves, which checks devices as the op's own wrapper does."""
    parsed = _parsed()
    by_name = {str(f.func.name): f for f in parsed.native_functions}
    return sorted(str(f.func.name) for f in parsed.native_functions
                  if f.structured_delegate is not None and f.device_check != DeviceCheckType.NoCheck
                  and by_name[str(f.structured_delegate)].device_check == DeviceCheckType.NoCheck
                  and sum(a.type.is_tensor_like() for a in f.func.arguments.flat_positional) >= 2)


def _native_functions():
    parsed = _parsed()
    by_name = {str(f.func.name): f for f in parsed.native_functions}
    groups = pre_group_native_functions(parsed.native_functions)
    group_of = {}
    for variants in groups.values():
        for f in variants.values():
            group_of[str(f.func.name)] = variants
    composite = set()
    for key in (DispatchKey.CompositeImplicitAutograd, DispatchKey.CompositeExplicitAutograd,
                DispatchKey.CompositeExplicitAutogradNonFunctional):
        composite |= {str(n) for n in parsed.backend_indices[key].index}
    return by_name, group_of, composite


def _decl(f: NativeFunction, name: str) -> tuple[str, list[str]]:
    # The C++ types must be exactly the dispatcher's, as torchgen chooses them per op.
    with local.parametrize(use_const_ref_for_mutable_tensors=f.use_const_ref_for_mutable_tensors,
                           use_ilistref_for_tensor_lists=f.part_of_structured_group):
        sig = DispatcherSignature.from_schema(f.func)
        return sig.decl(name=name), [a.name for a in sig.arguments()]


def _variant(f: NativeFunction, key: str = "PrivateUse1") -> Variant:
    prefix = "wrapper_" if key == "PrivateUse1" else f"wrapper_{key}_"
    if f.namespace != "aten":
        prefix += f"{f.namespace}_"
    cpp_name = prefix + f.func.name.unambiguous_name()
    return Variant(str(f.func.name), f.func.kind().name, f, cpp_name, *_decl(f, cpp_name), key, f.namespace)


def _custom_function(func: str, schema, path: str, line: int, err) -> NativeFunction | None:
    """An rbln:: operator's NativeFunction, parsed from its entry's schema as torchgen parses native_functions.yaml."""
    namespace, _, name = func.partition("::")
    if namespace != CUSTOM_NAMESPACE or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        err(f"'{func}': an operator of ops.yaml's own is '{CUSTOM_NAMESPACE}::<lowercase name>'")
        return None
    if not isinstance(schema, str) or not schema.startswith("("):
        err(f"{func}: an '{CUSTOM_NAMESPACE}::' operator needs a 'schema' such as '(Tensor self, float scale) -> Tensor'")
        return None
    try:
        f, _ = NativeFunction.from_yaml({"func": func + schema}, Location(path, line), set())
    except Exception as e:  # torchgen's parse errors are AssertionError, RuntimeError or ValueError
        err(f"{func}: schema {schema!r} does not parse: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return None
    return f


def is_operand(arg) -> bool:
    t = arg.type
    return isinstance(t, BaseType) and t.name in (BaseTy.Tensor, BaseTy.Scalar)


def load(path: str) -> list[Entry]:
    name = os.path.basename(path)
    try:
        raw = yaml.load(open(path).read(), Loader=_LineLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise OpsYamlError(f"{name}:{line}: YAML syntax error: {getattr(e, 'problem', e)}")
    if not isinstance(raw, list):
        raise OpsYamlError(f"{name}:1: expected a list of op entries")

    by_name, group_of, composite = _native_functions()
    errors: list[str] = []
    entries: list[Entry] = []
    seen: dict[tuple[str, str], int] = {}

    with local.parametrize(use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False):
        for item in raw:
            if not isinstance(item, dict):
                errors.append(f"{name}:?: each entry must be a mapping with a 'func' key, got {item!r}")
                continue
            line = item.pop("__line__")

            def err(msg: str) -> None:
                errors.append(f"{name}:{line}: {msg}")

            unknown = set(item) - KEYS
            if unknown:
                err(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(KEYS)}")
            func = item.get("func")
            if not isinstance(func, str):
                err("missing 'func' (an ATen overload name such as 'add.Tensor')")
                continue
            schema = item.get("schema")
            if "::" in func:
                f = _custom_function(func, schema, path, line, err)
                if f is None:
                    continue
                if item.get("strategy", "kernel") != "kernel" or not item.get("kernel") or item.get("kernel") in FAMILIES \
                        or item.get("structured") or item.get("key", "PrivateUse1") != "PrivateUse1":
                    err(f"{func}: an '{CUSTOM_NAMESPACE}::' operator takes strategy 'kernel' with a hand-written kernel "
                        f"of its own signature (there is no CPU implementation to fall back to or compose from)")
                    continue
            elif schema is not None:
                err(f"{func}: 'schema' is for '{CUSTOM_NAMESPACE}::' operators; ATen's come from native_functions.yaml")
                continue
            else:
                f = by_name.get(func)
            if f is None:
                base = func.split(".")[0]
                known = sorted(n for n in by_name if n.split(".")[0] == base)
                hint = f"; overloads of '{base}': {', '.join(known)}" if known else ""
                err(f"unknown op or overload '{func}' (not in native_functions.yaml){hint}")
                continue
            strategy = item.get("strategy", "kernel")
            if strategy not in STRATEGIES:
                err(f"unknown strategy '{strategy}' for {func}; one of {', '.join(STRATEGIES)}")
                continue
            if strategy == "compile" and f.func.kind() != SchemaKind.functional:
                err(f"{func}: strategy 'compile' takes the functional overload; its in-place and out= overloads "
                    f"register with it")
                continue
            if strategy == "library" and (f.func.kind() != SchemaKind.functional
                                          or any("[]" in str(a.type) and "Tensor" in str(a.type)
                                                 for a in f.func.arguments.flat_all)
                                          or not (all(str(r.type) == "Tensor" for r in f.func.returns)
                                                  or [str(r.type) for r in f.func.returns] == ["Tensor[]"])):
                err(f"{func}: strategy 'library' takes a functional overload with Tensor (or one Tensor[]) results "
                    f"and no tensor-list arguments")
                continue
            key = item.get("key", "PrivateUse1")
            if key not in DISPATCH_KEYS or (key != "PrivateUse1" and strategy != "kernel"):
                err(f"{func}: 'key' is one of {', '.join(DISPATCH_KEYS)}; other keys than PrivateUse1 take strategy "
                    f"'kernel'")
                continue
            for flag in ("synced", "upcast"):
                if item.get(flag) and strategy != "library":
                    err(f"{func}: '{flag}' only applies to strategy 'library'")
            if any(item.get(flag) and strategy != "library" for flag in ("synced", "upcast")):
                continue
            kernel, functor = item.get("kernel"), item.get("functor")
            # Whether a kernel or functor exists, and its signature, the compiler checks (the generated
            # declarations and wrappers name them); here only their spelling.
            for what, name_ in (("kernel", kernel), ("functor", functor)):
                if name_ is not None and not (isinstance(name_, str) and CPP_NAME.fullmatch(name_)):
                    err(f"{func}: '{what}' must be a C++ name (optionally namespace-qualified), got {name_!r}")
            if strategy == "kernel":
                if not kernel:
                    err(f"{func}: strategy 'kernel' needs a 'kernel' (a family: {', '.join(FAMILIES)}; or a hand-written "
                        f"function with the op's dispatcher signature, in {KERNEL_NAMESPACE} unless qualified)")
                    continue
                if kernel in FAMILIES and not functor:
                    err(f"{func}: kernel family '{kernel}' needs a 'functor'")
                    continue
                if kernel not in FAMILIES and functor:
                    err(f"{func}: 'functor' only applies to a kernel family ({', '.join(FAMILIES)})")
                    continue
            elif strategy in ("fallback", "composite") and kernel and not functor:
                pass
            elif kernel or functor:
                err(f"{func}: 'kernel'/'functor' only apply to strategy 'kernel' (or a hand-written fallback wrapper "
                    f"or composite)")
                continue
            if strategy == "composite" and func not in composite:
                err(f"{func} has no composite implementation upstream; use strategy 'kernel' or 'fallback'")
                continue

            dtypes_raw = item.get("dtypes", "all")
            dtypes: list[str] = []
            for d in dtypes_raw if isinstance(dtypes_raw, list) else [dtypes_raw]:
                if d == "any":  # no dtype check: memory and copy ops take every dtype
                    dtypes.append(d)
                elif d in DTYPE_GROUPS:
                    dtypes += DTYPE_GROUPS[d]
                elif d in DTYPES:
                    dtypes.append(d)
                else:
                    err(f"{func}: unknown dtype '{d}'; known: {', '.join(list(DTYPES) + list(DTYPE_GROUPS) + ['any'])}")
            dtypes = list(dict.fromkeys(dtypes))
            tolerance = item.get("tolerance", {})
            if isinstance(tolerance, dict):
                tolerance = {d: v for d, v in tolerance.items() if d != "__line__"}
            if not isinstance(tolerance, dict) or not all(
                    d in DTYPES and isinstance(v, list) and len(v) == 2
                    and all(isinstance(x, (int, float)) and x > 0 for x in v) for d, v in tolerance.items()):
                err(f"{func}: 'tolerance' must map dtypes to [atol, rtol] (positive numbers), got {tolerance!r}")
                continue

            structured = bool(item.get("structured", False))
            if structured:
                group = group_of[func]
                out = group.get(SchemaKind.out)
                # One out= argument per result (max.dim's values and indices): the functional passes that many
                # undefined tensors, which the kernel allocates.
                if kernel in FAMILIES or out is None or f.func.kind() != SchemaKind.functional \
                        or len(out.func.arguments.out) != len(f.func.returns) \
                        or not all(str(r.type) == "Tensor" for r in f.func.returns):
                    err(f"{func}: 'structured' needs a functional overload with Tensor results, an out= overload "
                        f"with one out argument per result, and a hand-written kernel with the out= signature")
                    continue
                variants = [group[k] for k in (SchemaKind.functional, SchemaKind.inplace, SchemaKind.out) if k in group]
            elif kernel in FAMILIES or strategy == "compile":
                group = group_of[func]
                variants = [group[k] for k in (SchemaKind.functional, SchemaKind.inplace, SchemaKind.out) if k in group]
                if strategy == "compile":
                    # The compiled kernel reads a variant's arguments as the functional's, then its outs: a factory's
                    # out= form has no dtype/device arguments (logspace.out), so it stays with the fallback.
                    names = [a.name for a in f.func.arguments.flat_all]
                    variants = [v for v in variants if [a.name for a in v.func.arguments.flat_all][:len(names)] == names]
                operands = [a for a in f.func.arguments.flat_non_out if is_operand(a)]
                if kernel in FAMILIES and len(operands) < FAMILIES[kernel]:
                    err(f"{func}: family '{kernel}' takes {FAMILIES[kernel]} Tensor/Scalar operands, the schema has {len(operands)}")
                    continue
            else:
                variants = [f]
            entry = Entry(func, line, strategy, kernel, functor, dtypes, str(item.get("notes", "")).strip(),
                          _opinfo_names(item, func), [_variant(v, key) for v in variants], tolerance, structured,
                          bool(item.get("synced", False)), bool(item.get("upcast", False)), key=key)
            if kernel and kernel not in FAMILIES:  # the out= overload's signature for a structured kernel
                entry.kernel_decl = _decl(group_of[func][SchemaKind.out] if structured else f, entry.kernel_name)[0]
            dup = [o for o in entry.overloads if (key, o) in seen]
            if dup:
                err(f"duplicate entry: {', '.join(dup)} already registered by the entry at line {seen[key, dup[0]]}")
                continue
            for o in entry.overloads:
                seen[key, o] = line
            entries.append(entry)
    if errors:
        raise OpsYamlError("\n".join(errors))
    return entries


def _opinfo_names(item: dict, func: str) -> list[str]:
    if "opinfo" not in item:
        return [func.split(".")[0].rstrip("_").lstrip("_")]
    value = item["opinfo"]
    return [] if value is None else ([value] if isinstance(value, str) else list(value))
