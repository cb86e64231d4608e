"""Every place torch_rbln replaces a PyTorch function or adds to a PyTorch table, in one list.

PyTorch decides by device type in a few places that have no extension point. Each `Patch` below
names what it replaces (its qualified name), why, when it acts and the upstream change that
would remove it; the code that answers for rbln stays beside its logic (`replacement` and
`applies` name it), but only `install()` here puts anything into torch, so the list cannot drift
from what runs (tests/python/test_patches.py compares torch's functions and tables before and
after `import torch_rbln` against it). docs/patches.md is generated from it:

    python -m torch_rbln._patches --markdown > docs/patches.md

A replaced function is installed once and stays installed: the installed function asks
`applies` (with the call's own arguments) whether the call is about rbln, runs the replacement
if so and upstream's function otherwise, so a CPU compile or a CPU fake convolution in the same
process, on any thread, runs exactly upstream's code. A table only gains entries under rbln's own
keys (never replacing one), which only lookups for rbln read.

Hugging Face's transformers and accelerate decide by device type from lists of their own too
(torch_rbln/_huggingface.py). Their patches (`Patch.after_import`) are installed when the module
that defines the target has loaded: at `import torch_rbln` if it has, else when the import system
marks it loaded. For that, a finder first in `sys.meta_path` (`_AfterImport`) finds nothing itself:
for a watched module it returns the spec the other finders return, marked (`_LoadedSpec`), and a
module already loading when torch_rbln is imported (transformers' training_args imports torch, which
imports torch_rbln) has its spec marked in place. The finder leaves `sys.meta_path` once every
watched module has loaded.

Registrations through PyTorch's extension points are not patches; `REGISTRATIONS` lists the
ones torch_rbln makes, with where.
"""
from __future__ import annotations

import collections
import functools
import importlib
import importlib.machinery
import inspect
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

# When a patch acts (Patch.scope).
RBLN_COMPILE = "rbln compile"
RBLN_OPERANDS = "rbln operands"
RBLN_ACCELERATOR = "rbln accelerator"
RBLN_LIBRARY_OPERANDS = "rbln library operands"
INSIDE_RBLN_ANSWER = "inside rbln's answer"
PROCESS = "process"
SCOPES = {
    RBLN_COMPILE: "installed when the Inductor backend registers (the first rbln compile); rbln's answer only "
                  "for an rbln graph or node, upstream's for every other call",
    RBLN_OPERANDS: "installed at import; rbln's answer only for operands on rbln, upstream's for every other call",
    RBLN_ACCELERATOR: "installed when the library module that defines the target has loaded; rbln's answer only "
                      "when the process's accelerator is rbln and the call is not asked to use the CPU or another "
                      "device, upstream's for every other call",
    RBLN_LIBRARY_OPERANDS: "installed when the library module that defines the target has loaded; rbln's answer "
                           "only for operands on rbln, upstream's for every other call",
    INSIDE_RBLN_ANSWER: "installed at import; rbln's answer only on the thread running another patch's rbln "
                        "answer, while it runs (that patch names it), upstream's for every other call",
    PROCESS: "process-wide, from import (Inductor's tables: from when the Inductor backend registers): entries "
             "under rbln's own keys, which only lookups for rbln read",
}


@dataclass(frozen=True)
class Patch:
    target: str  # qualified name of the function replaced, or of the table added to
    why: str
    upstream: str  # the upstream change that would remove the patch
    scope: str  # a key of SCOPES
    replacement: str = ""  # "module:function": rbln's answer, called with the target's arguments
    applies: str = ""  # "module:function": whether a call (same arguments) gets rbln's answer
    aliases: tuple[str, ...] = ()  # other names upstream binds the same function to, rebound too
    keys: tuple[Any, ...] = ()  # a table: the keys added
    values: str = ""  # "module:function": key -> the value added
    after_import: str = ""  # a library other than torch: the module whose loading installs the patch

    @property
    def scoped(self) -> bool:
        return self.scope != PROCESS

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the patch changes: the function's names, or `table[key]` per key."""
        if self.keys:
            return tuple(f"{self.target}[{key!r}]" for key in self.keys)
        return (self.target, *self.aliases)


PATCHES: tuple[Patch, ...] = (
    Patch(
        target="torch._C._conv_determine_backend_memory_format",
        scope=RBLN_OPERANDS,
        replacement="torch_rbln._convolution_layout:memory_format",
        applies="torch_rbln._convolution_layout:on_rbln",
        why="the fake convolution (`torch._subclasses.fake_impls.conv`) takes its result's memory format from it, "
            "and it answers contiguous for every PrivateUse1 device whatever the operands, while rbln's "
            "convolutions return CUDA's channels_last for channels_last operands: fake and real strides would "
            "disagree (Inductor's stride asserts fail). For rbln operands it answers with the kernels' rule. "
            "At import, since fake tensors on rbln exist without Inductor (torch.export)",
        upstream="let a PrivateUse1 backend answer in `determine_backend_memory_format` (a hook, as XPU's "
                 "`xpu_conv_use_channels_last`)",
    ),
    Patch(
        target="torch.nn.modules.linear_cross_entropy_options.LinearCrossEntropyOptions._resolve_auto_acc_dtype",
        scope=RBLN_OPERANDS,
        replacement="torch_rbln._policies:float32_accumulation",
        applies="torch_rbln._policies:low_precision_on_rbln",
        why="the chunked linear_cross_entropy accumulates float16/bfloat16 in float32 only where it knows a "
            "mixed-precision matmul exists (CPU, recent CUDA); rbln's matmul widens to float32 as CPU's does, so "
            "rbln takes CPU's answer instead of input-dtype sums",
        upstream="ask the device (e.g. its device module or `torch.accelerator`) whether it has a mixed-precision "
                 "matmul",
    ),
    Patch(
        target="torch.nn.modules.linear_cross_entropy_options._AUTO_DEFAULTS",
        scope=PROCESS,
        keys=(("rbln", torch.float16), ("rbln", torch.bfloat16)),
        values="torch_rbln._policies:cpu_auto_default",
        why="the per-(device, dtype) policy table of linear_cross_entropy's automatic options lists CPU and CUDA "
            "only; rbln takes CPU's entries (its matmul is CPU's)",
        upstream="a device-neutral default, or a registration for a device's entries",
    ),
    Patch(
        target="sys.modules",
        scope=PROCESS,
        keys=("torch.rbln.amp", "torch.rbln.graphs", "torch.rbln.memory", "torch.rbln.random", "torch.rbln.streams"),
        values="torch_rbln.rbln:_submodule",
        why="`import torch.rbln.memory` (and amp, graphs, random, streams) works as for torch.cuda: "
            "`torch._register_device_module` registers the module as `torch.rbln` only, and without the "
            "entries Python would load a second copy of each submodule under torch.rbln's path",
        upstream="`torch._register_device_module` registering the device module's submodules under `torch.<device>.`",
    ),
    Patch(
        target="torch._inductor.utils.get_current_backend",
        aliases=("torch._inductor.codegen.common.get_current_backend",),
        scope=RBLN_COMPILE,
        replacement="torch_rbln._inductor.upstream_patches:cpp_backend",
        applies="torch_rbln._inductor.upstream_patches:for_rbln_device",
        why="returns `config.cuda_backend` (\"triton\") for any device it does not know; the C++ codegen then skips "
            "its dtype fixes (`KeyError: None` on `torch.where` with int64). For rbln: CPU's backend, \"cpp\" "
            "(other modules' names of it are asked about cuda and xpu only)",
        upstream="let a registered backend declare its kernel language (the scheduling class's, or a "
                 "`register_backend_for_device` argument)",
    ),
    Patch(
        target="torch._inductor.scheduler.BaseSchedulerNode.is_cpu",
        scope=RBLN_COMPILE,
        replacement="torch_rbln._inductor.upstream_patches:runs_cpu_kernels",
        applies="torch_rbln._inductor.upstream_patches:node_on_rbln",
        why="guards loop reordering that is validated only for SIMD kernels; false for rbln nodes, so C++ kernels "
            "took it and softmax crashed. True for rbln nodes (their kernels are CPU's)",
        upstream="ask the node's scheduling backend (`CppScheduling`) instead of comparing the device type to \"cpu\"",
    ),
    Patch(
        target="torch._inductor.codegen.cpp_utils.DEVICE_TO_ATEN",
        scope=PROCESS,
        keys=("rbln",),
        values="torch_rbln._inductor.upstream_patches:aten_device",
        why="the C++ wrapper spells the `device=` argument of an op it calls back through the dispatcher from this "
            "table, which has no PrivateUse1 device: a plan or graph that makes a buffer on rbln through the "
            "dispatcher (an `empty` with `device=`) fails with \"rbln not found in DEVICE_TO_ATEN\". Added when "
            "the Inductor backend registers",
        upstream="map any PrivateUse1 device type to `at::kPrivateUse1` (`torch._C._get_privateuse1_backend_name()`)",
    ),
    Patch(
        target="torch._inductor.codegen.cpp_utils.DEVICE_TO_INT",
        scope=PROCESS,
        keys=("rbln",),
        values="torch_rbln._inductor.upstream_patches:device_type_int",
        why="an AOTInductor package built with `aot_inductor.debug_compile` checks its inputs' device type "
            "against this table, which lists cpu and cuda only: without an entry it checks no rbln input. Added "
            "when the Inductor backend registers",
        upstream="map any PrivateUse1 device type to `aoti_torch_device_type_privateuse1()`",
    ),
    Patch(
        target="torch._inductor.codecache._get_cpp_wrapper_header",
        scope=RBLN_COMPILE,
        replacement="torch_rbln._inductor.upstream_patches:cpu_wrapper_header",
        applies="torch_rbln._inductor.upstream_patches:rbln_wrapper_header",
        why="names the header an AOTInductor compile precompiles after the device type "
            "(`aoti_include/rbln.h`, which does not exist); an rbln package's wrapper is CPU's C++ wrapper "
            "(cpp_wrapper.py includes CPU's header), so it precompiles CPU's",
        upstream="ask the registered wrapper class (`get_device_include_path_aot`) for the header",
    ),
    Patch(
        target="torch._inductor.graph.GraphLowering.decide_layout_opt",
        scope=RBLN_COMPILE,
        replacement="torch_rbln._inductor.upstream_patches:cpu_layout_opt",
        applies="torch_rbln._inductor.upstream_patches:convolves_on_rbln",
        why="turns a graph with convolutions to channels_last always on CPU with oneDNN and by a FLOP heuristic "
            "tuned for GPUs elsewhere; rbln's convolutions are oneDNN's and return channels_last for channels_last "
            "operands, so a graph with a convolution on rbln takes CPU's answer (channels_last when oneDNN is "
            "available and `layout_optimization` is on)",
        upstream="ask the device (its `DeviceInterface`) whether it prefers channels_last",
    ),
    Patch(
        target="transformers.training_args.TrainingArguments._setup_devices",
        after_import="transformers.training_args",
        scope=RBLN_ACCELERATOR,
        replacement="torch_rbln._huggingface:setup_devices",
        applies="torch_rbln._huggingface:trains_on_accelerator",
        why="`TrainingArguments.device` (a cached property) is `cuda:0`, a device transformers lists, or the CPU, "
            "while accelerate, which finds rbln through `torch.accelerator`, moves the model to rbln: the Trainer's "
            "batches stay on the CPU and the first step fails. Where upstream falls back to the CPU in a single "
            "process and accelerate's state is on rbln, it answers `rbln:0` and makes it current, as upstream "
            "answers `cuda:0` (`use_cpu`, `ACCELERATE_USE_CPU` and `ACCELERATE_TORCH_DEVICE` keep upstream's answer)",
        upstream="transformers: take accelerate's device (`PartialState.device`, which asks `torch.accelerator`) "
                 "where `_setup_devices` lists no device type",
    ),
    Patch(
        target="transformers.utils.import_utils.is_torch_bf16_gpu_available",
        aliases=("transformers.utils.is_torch_bf16_gpu_available",
                 "transformers.training_args.is_torch_bf16_gpu_available"),
        after_import="transformers.training_args",
        scope=RBLN_ACCELERATOR,
        replacement="torch_rbln._huggingface:bf16_supported",
        applies="torch_rbln._huggingface:rbln_without_cuda",
        why="`TrainingArguments(bf16=True)` raises unless a device type transformers lists supports bfloat16; on "
            "rbln it answers `torch.rbln.is_bf16_supported()`",
        upstream="transformers: ask `torch.get_device_module(torch.accelerator.current_accelerator()).is_bf16_supported()`",
    ),
    Patch(
        target="accelerate.state.PartialState._prepare_backend",
        after_import="accelerate.state",
        scope=RBLN_ACCELERATOR,
        replacement="torch_rbln._huggingface:prepare_backend",
        applies="torch_rbln._huggingface:launched_on_rbln",
        why="a process of a distributed launch (torchrun, `accelerate launch --multi_gpu`) trains data-parallel only "
            "on device types with a backend in accelerate's table (`TORCH_DISTRIBUTED_BACKENDS`) and a "
            "`DistributedType.MULTI_<DEVICE>`; on rbln each process trained alone. For a launched process whose "
            "accelerator is rbln (not asked to use the CPU): the rbln-ccl backend (or the one asked for) and "
            "MULTI_GPU, accelerate's one-process-per-device DDP type, whose code is device-neutral but for "
            "`set_device`",
        upstream="accelerate: a distributed type for any `torch.accelerator` device, with the backend "
                 "`torch.distributed.get_default_backend_for_device` names",
    ),
    Patch(
        target="accelerate.state.PartialState.set_device",
        after_import="accelerate.state",
        scope=RBLN_ACCELERATOR,
        replacement="torch_rbln._huggingface:set_device",
        applies="torch_rbln._huggingface:distributed_on_rbln",
        why="takes the device module from the distributed type's name (`torch.cuda` for MULTI_GPU); for MULTI_GPU on "
            "rbln: `rbln:<local rank>`, made current, as upstream's `cuda:<local rank>`",
        upstream="accelerate: the device type from `torch.accelerator.current_accelerator()` (the same change as "
                 "`_prepare_backend`'s)",
    ),
    Patch(
        target="torch._higher_order_ops.out_dtype.is_int_mm",
        scope=RBLN_OPERANDS,
        replacement="torch_rbln._quantization:int_mm_on_rbln",
        applies="torch_rbln._quantization:rbln_operands",
        why="`out_dtype(aten.mm, torch.int32, a, b)` (torchao's int8 x int8 matmul) runs `torch._int_mm` only for "
            "CUDA and XPU operands, else it casts both to int32 and runs a general int32 matmul; rbln has "
            "`_int_mm` (kernels/quantized), so int8 operands on rbln take it",
        upstream="ask whether the operands' device has an `_int_mm` kernel (the dispatcher knows) instead of "
                 "listing CUDA and XPU",
    ),
    Patch(
        target="torchao.quantization.quant_api._check_hardware_support",
        after_import="torchao.quantization.quant_api",
        scope=RBLN_ACCELERATOR,
        replacement="torch_rbln._quantization:float8_hardware_check",
        applies="torch_rbln._huggingface:rbln_without_cuda",
        why="torchao's `Float8DynamicActivationFloat8WeightConfig` asserts a CUDA capability >= 8.9, MI300 or XPU "
            "before quantizing, whatever the weights' device; its per-tensor and per-row recipes run "
            "`torch._scaled_mm`, which rbln computes (kernels/quantized). Where the process's accelerator is rbln "
            "those two granularities pass; others get torchao's check",
        upstream="torchao: ask the weight's device whether it has `_scaled_mm` for the granularity (e.g. try the op "
                 "once, or a per-device capability table a backend can register into)",
    ),
    Patch(
        target="torchao.quantization.quantize_.workflows.int4.int4_tile_packed_to_4d_tensor.Int4TilePackedTo4dTensor"
               ".from_hp",
        after_import="torchao.quantization.quantize_.workflows.int4.int4_tile_packed_to_4d_tensor",
        scope=RBLN_LIBRARY_OPERANDS,
        replacement="torch_rbln._quantization:tile_packed_from_hp",
        applies="torch_rbln._quantization:rbln_weight",
        why="`Int4WeightOnlyConfig(int4_packing_format=\"tile_packed_to_4d\")` packs with CUDA's "
            "`_convert_weight_to_int4pack` and runs CUDA's `_weight_int4pack_mm`, which rbln has "
            "(kernels/quantized), but first asks `torch.cuda.get_device_capability()`, which a torch without CUDA "
            "cannot answer. For a weight on rbln, upstream's `from_hp` runs with that question answered (the "
            "next patch)",
        upstream="torchao: ask the weight's device whether it has `_weight_int4pack_mm` (or a capability table "
                 "a backend can register into) instead of CUDA's compute capability",
    ),
    Patch(
        target="torch.cuda.get_device_capability",
        scope=INSIDE_RBLN_ANSWER,
        replacement="torch_rbln._quantization:tinygemm_capability",
        applies="torch_rbln._quantization:packing_for_rbln",
        why="answers `(8, 0)` (the capability of CUDA's tinygemm kernels, which rbln's int4 ops equal) only while "
            "the previous patch runs torchao's `from_hp` for a weight on rbln, on that thread",
        upstream="the same torchao change as the previous patch's",
    ),
)

# When each patch is installed: at import, when the Inductor backend registers, or (a library's) when the module
# `after_import` names has loaded.
_INDUCTOR = "inductor"
_IMPORT = "import"


def _when(patch: Patch) -> str:
    if patch.after_import:
        return patch.after_import
    return _INDUCTOR if patch.target.startswith("torch._inductor.") else _IMPORT


# Changes torch_rbln makes through PyTorch's extension points: not patches (glob pattern -> what makes it).
REGISTRATIONS = {
    "torch.rbln": "torch._register_device_module (torch_rbln/__init__.py)",
    "sys.modules['torch.rbln']": "torch._register_device_module (torch_rbln/__init__.py)",
    "torch.utils.backend_registration._privateuse1_backend_name": "torch.utils.rename_privateuse1_backend",
    "torch._tensor.Tensor.*rbln*": "torch.utils.generate_methods_for_privateuse1_backend",
    "torch.nn.modules.module.Module.rbln": "torch.utils.generate_methods_for_privateuse1_backend",
    "torch.storage.*.*rbln*": "torch.utils.generate_methods_for_privateuse1_backend",
    "torch.nn.utils.rnn.PackedSequence.*rbln*": "torch.utils.generate_methods_for_privateuse1_backend",
    "torch._dynamo.device_interface.device_interfaces['rbln*']": "register_interface_for_device (_inductor/__init__.py)",
    "torch._inductor.codegen.common.device_codegens['rbln']": "register_backend_for_device (_inductor/__init__.py)",
    "torch._inductor.codegen.common.custom_backend_passes['rbln']": "register_backend_for_device's device_custom_pass",
    "torch._inductor.codegen.common.custom_backend_codegen_configs['rbln']": "register_backend_for_device",
    "torch._inductor.codegen.common.device_op_overrides_dict['rbln']": "register_device_op_overrides",
    "torch.distributed.distributed_c10d.Backend.*": "c10d Backend.register_backend (torch_rbln/distributed.py)",
    "torch.ops.rbln": "torch.library's Library(\"rbln\", \"DEF\") (rbln::max_pool2d, _inductor/pooling.py)",
}

_lock = threading.RLock()  # a library module may finish loading inside install()
_installed: set[str] = set()
originals: dict[str, Any] = {}  # target -> upstream's function, for the functions replaced
hits: collections.Counter = collections.Counter()  # target -> calls that got rbln's answer (a diagnostic)


def _ref(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def resolve(qualname: str) -> tuple[Any, str]:
    """(the object that holds the name, the attribute): the longest importable module prefix, then attributes."""
    parts = qualname.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        return functools.reduce(getattr, parts[i:-1], owner), parts[-1]
    raise ValueError(f"no module in {qualname!r}")


def _gated(target: str, original: Callable, replacement: Callable, applies: Callable) -> Callable:
    @functools.wraps(original)
    def patched(*args, **kwargs):
        if applies(*args, **kwargs):
            hits[target] += 1
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    patched.__rbln_patch__ = target
    return patched


def _apply(patch: Patch) -> None:
    owner, attr = resolve(patch.target)
    if patch.keys:
        table, value = getattr(owner, attr), _ref(patch.values)
        for key in patch.keys:
            table.setdefault(key, value(key))
        return
    static = inspect.getattr_static(owner, attr) if inspect.isclass(owner) else None
    if isinstance(static, functools.cached_property):  # the function it computes with is replaced
        patched = _gated(patch.target, static.func, _ref(patch.replacement), _ref(patch.applies))
        prop = functools.cached_property(patched)
        prop.__set_name__(owner, attr)
        prop.__wrapped__, prop.__rbln_patch__ = static.func, patch.target
        setattr(owner, attr, prop)
        originals[patch.target] = static.func
        return
    # A classmethod's replacement calls upstream's bound method: installed as a staticmethod, as a staticmethod's.
    is_static = isinstance(static, (staticmethod, classmethod))
    original = getattr(owner, attr)
    patched = _gated(patch.target, original, _ref(patch.replacement), _ref(patch.applies))
    places = [resolve(name) for name in patch.names]
    for name, (holder, name_attr) in zip(patch.names, places):  # all checked before any is changed
        if getattr(holder, name_attr) != original:  # a classmethod is bound anew at each lookup: equal, not same
            library = patch.after_import.partition(".")[0] or "torch"
            raise RuntimeError(f"torch_rbln._patches: {name} is not {patch.target} (has {library} changed?)")
    for holder, name_attr in places:
        setattr(holder, name_attr, staticmethod(patched) if is_static else patched)
    originals[patch.target] = original


def install(when: str = _IMPORT) -> None:
    """Installs the patches of `when` ("import", "inductor" when the Inductor backend registers, or a library
    module's name once it has loaded); idempotent, thread-safe. At "import", also has each library module's
    patches installed once it has loaded."""
    with _lock:
        for patch in PATCHES:
            if _when(patch) == when and patch.target not in _installed:
                _apply(patch)
                _installed.add(patch.target)
    if when == _IMPORT:
        _watch({patch.after_import for patch in PATCHES if patch.after_import})


def _loaded(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(module.__spec__, "_initializing", False)


class _LoadedSpec(importlib.machinery.ModuleSpec):
    """A watched module's spec: when the import system marks the module loaded (`_initializing` false, also set
    when its code raised: then it is not in sys.modules), its patches are installed and the mark goes."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "_initializing" and not value:
            self.__class__ = importlib.machinery.ModuleSpec
            if sys.modules.get(self.name) is not None:
                _install_library(self.name)
                _AfterImport.done(self.name)


class _AfterImport:
    """First in sys.meta_path while a watched module has not loaded; finds no module itself."""

    pending: set[str] = set()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.pending:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None and finder is not cls else None
            if spec is not None:
                if type(spec) is importlib.machinery.ModuleSpec:
                    spec.__class__ = _LoadedSpec
                return spec
        return None

    @classmethod
    def done(cls, name: str) -> None:
        with _lock:
            cls.pending.discard(name)
            if not cls.pending and cls in sys.meta_path:
                sys.meta_path.remove(cls)


def _install_library(name: str) -> None:
    """install(name), which must not fail the user's import of the library: a version whose functions differ
    from the ones listed keeps upstream's and warns."""
    try:
        install(name)
    except Exception as error:  # noqa: BLE001
        import warnings

        warnings.warn(f"torch_rbln: {name} is left unpatched, so it may not run on rbln: {error}", stacklevel=2)


def _watch(names: set[str]) -> None:
    for name in sorted(names):
        if _loaded(name):
            _install_library(name)
            continue
        module = sys.modules.get(name)
        if module is not None and type(module.__spec__) is importlib.machinery.ModuleSpec:  # loading now
            module.__spec__.__class__ = _LoadedSpec
        with _lock:
            _AfterImport.pending.add(name)
            if _AfterImport not in sys.meta_path:
                sys.meta_path.insert(0, _AfterImport)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/patches.md."""
    lines = [
        "# Patches of PyTorch (and of transformers and accelerate)",
        "",
        "Generated from `python/torch_rbln/_patches.py` by `python -m torch_rbln._patches --markdown`;",
        "`tests/python/test_patches.py` checks that this file matches it and that importing",
        "`torch_rbln` changes nothing in torch, transformers or accelerate that the list leaves out.",
        "",
        "Scopes:",
        "",
        *(f"- **{scope}**: {text}." for scope, text in SCOPES.items()),
        "",
        "The patches of transformers and accelerate (docs/training.md) wait for the module that defines",
        "their target: installed at `import torch_rbln` if it has loaded, else when the import system marks",
        "it loaded, through a finder first in `sys.meta_path` (`_AfterImport`) that finds no module itself",
        "and leaves once every such module has loaded.",
        "",
        "| what | scope | why | upstream change that removes it |",
        "|---|---|---|---|",
    ]
    for patch in PATCHES:
        what = ", ".join(f"`{name}`" for name in patch.names)
        if not patch.keys:
            what += " (replaced)"
        else:
            what += " (added)"
        lines.append(f"| {_cell(what)} | {patch.scope} | {_cell(patch.why)} | {_cell(patch.upstream)} |")
    lines += [
        "",
        "## Registrations (not patches)",
        "",
        "What importing `torch_rbln` changes in torch through PyTorch's own extension points:",
        "",
        "| what | through |",
        "|---|---|",
        *(f"| `{_cell(name)}` | {_cell(how)} |" for name, how in REGISTRATIONS.items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m torch_rbln._patches --markdown")
    sys.stdout.write(markdown())
