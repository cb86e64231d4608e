"""torch_rbln._patches is the whole list of what torch_rbln replaces in torch (docs/patches.md).

A fresh interpreter records torch's functions and tables (every attribute of every torch module
loaded, the attributes of their classes, the entries of their dicts, sys.modules' torch entries),
imports torch_rbln and registers its Inductor backend, and records them again: every change must
be a listed patch or a registration through an extension point (`_patches.REGISTRATIONS`). The
scoped patches answer only for rbln: a CPU compile in the same process runs upstream's code.
"""
from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import textwrap

import pytest

import torch_rbln
from torch_rbln import _patches

from conftest import ROOT

# Torch modules that torch_rbln's import and its Inductor registration use, plus the ones the patches
# are about, imported before torch_rbln so their contents have a "before".
EXTRA_MODULES = ["torch._subclasses.fake_impls", "torch._decomp", "torch._inductor.compile_fx",
                 "torch._inductor.kernel.mm_common", "torch.nn.modules.linear_cross_entropy_options", "torch.export",
                 "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"]

# Changes that are neither patches nor registrations: state torch itself keeps as it runs (pattern -> why).
TORCH_OWN_STATE = {
    "torch._library.simple_registry.*": "the fake-kernel registry of torch.library's operator registrations",
}

SNAPSHOT = r"""
import importlib, json, sys
IMMUTABLE = (int, float, str, bytes, bool, type(None), frozenset, tuple)

def torch_modules():
    return [(n, m) for n, m in list(sys.modules.items()) if n.split(".")[0] in ("torch", "functorch") and m is not None]

def snapshot(modules):
    # name -> (alternative names of the same place, value), in `modules` (torch's, as loaded before torch_rbln:
    # a module torch_rbln adds, such as torch.rbln, is its own); a dict or class reached from several modules
    # is recorded once, with every name that reaches it.
    places, sites = {}, {}
    for modname, mod in modules:
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, value in items:
            places[f"{modname}.{attr}"] = ((f"{modname}.{attr}",), value)
            if isinstance(value, (type, dict)):
                sites.setdefault(id(value), (value, []))[1].append(f"{modname}.{attr}")
    for value, names in sites.values():
        if isinstance(value, type):
            names = names + [f"{value.__module__}.{value.__qualname__}"]
            entries = list(vars(value).items())
            fmt = "{}.{}"
        else:
            entries = list(value.items()) if len(value) < 100000 else []
            fmt = "{}[{!r}]"
        for key, v in entries:
            alternatives = tuple(fmt.format(n, key) for n in names)
            places[alternatives[0]] = (alternatives, v)
    for name, mod in torch_modules():
        places[f"sys.modules[{name!r}]"] = ((f"sys.modules[{name!r}]",), mod)
    return places

def changed(before, after):
    if before is after:
        return False
    return not (isinstance(before, IMMUTABLE) and type(before) is type(after) and before == after)

def differences(before, after):  # what was added, removed or replaced between two snapshots, with its names
    changes = []
    for key in before.keys() | after.keys():
        b, a = before.get(key), after.get(key)
        if b is None or a is None or changed(b[1], a[1]):
            changes.append({"names": list((a or b)[0]), "kind": "added" if b is None else "removed" if a is None
                            else "replaced"})
    return changes
"""

MODULES_USED = """
import json, sys, torch_rbln, torch_rbln._inductor
torch_rbln._inductor.register()
print(json.dumps(sorted(n for n in sys.modules if n.split(".")[0] in ("torch", "functorch"))))
"""

COMPARE = SNAPSHOT + """
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        pass
modules = torch_modules()
before = snapshot(modules)
import torch_rbln, torch_rbln._inductor
torch_rbln._inductor.register()
after = snapshot([(n, sys.modules.get(n)) for n, _ in modules if sys.modules.get(n) is not None])
changes = differences(before, after)
new_modules = sorted(n for n, m in torch_modules()  # torch.rbln and its submodules are torch_rbln's own
                     if f"sys.modules[{n!r}]" not in before and not m.__name__.startswith("torch_rbln."))
print(json.dumps({"changes": changes, "new_modules": new_modules}))
"""


def run(code: str, *args: str) -> dict | list:
    # Autoload off: `import torch` must not import torch_rbln before the first record.
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def matches(names: list[str], patterns) -> bool:
    """Glob patterns in which `[` is literal (a table's entry), `*` any text."""
    return any(fnmatch.fnmatchcase(name, pattern.replace("[", "[[]")) for name in names for pattern in patterns)


def test_importing_torch_rbln_changes_only_what_patches_lists():
    modules = sorted(set(run(MODULES_USED)) | set(EXTRA_MODULES))
    result = run(COMPARE, json.dumps(modules))
    listed = {name for patch in _patches.PATCHES if not patch.after_import for name in patch.names}
    allowed = list(_patches.REGISTRATIONS) + list(TORCH_OWN_STATE)
    unlisted = [c for c in result["changes"] if not listed & set(c["names"]) and not matches(c["names"], allowed)]
    assert not unlisted, f"torch_rbln changes torch where torch_rbln._patches does not say: {unlisted}"
    seen = {name for c in result["changes"] for name in c["names"]}
    assert listed <= seen, f"listed but not changed (a stale entry, or a module missing above): {listed - seen}"
    # Everything torch_rbln loads was loaded before the first record, so nothing went unseen.
    assert not result["new_modules"], result["new_modules"]


# The libraries' modules the patches are about, loaded (without torch_rbln: autoload off) before the first record.
LIBRARY_MODULES = sorted({patch.after_import for patch in _patches.PATCHES if patch.after_import})
LIBRARIES = sorted({name.partition(".")[0] for name in LIBRARY_MODULES})

LIBRARY_COMPARE = SNAPSHOT + """
libraries = json.loads(sys.argv[2])
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
modules = [(n, m) for n, m in list(sys.modules.items()) if n.split(".")[0] in libraries and m is not None]


def library_snapshot(modules):  # the libraries' functions and tables (sys.modules' torch entries are the other test's)
    return {k: v for k, v in snapshot(modules).items() if not k.startswith("sys.modules[")}


before = library_snapshot(modules)
import torch_rbln
after = library_snapshot([(n, sys.modules.get(n)) for n, _ in modules if sys.modules.get(n) is not None])
changes = differences(before, after)
print(json.dumps({"changes": changes, "finder": torch_rbln._patches._AfterImport in sys.meta_path}))
"""


def test_importing_torch_rbln_changes_only_what_patches_lists_in_libraries():
    # transformers and accelerate loaded first: torch_rbln's import installs their patches at once.
    result = run(LIBRARY_COMPARE, json.dumps(LIBRARY_MODULES), json.dumps(LIBRARIES))
    listed = {name for patch in _patches.PATCHES if patch.after_import for name in patch.names}
    # torch's own objects a library's modules reach (torchao's `Tensor`) are the other test's
    unlisted = [c for c in result["changes"] if not listed & set(c["names"])
                and not any(name.startswith("torch.") for name in c["names"])]
    assert not unlisted, f"torch_rbln changes {LIBRARIES} where torch_rbln._patches does not say: {unlisted}"
    seen = {name for c in result["changes"] for name in c["names"]}
    assert listed <= seen, f"listed but not changed: {listed - seen}"
    assert not result["finder"]  # nothing left to wait for


LOADED_LATER = """
import json, sys
import transformers
transformers.TrainingArguments  # loads training_args, which imports torch, which imports torch_rbln (autoload)
import accelerate.state  # loaded after torch_rbln
from torch_rbln import _patches

patched = {}
for patch in _patches.PATCHES:
    for name in patch.names if patch.after_import else ():
        holder, attr = _patches.resolve(name)
        fn = getattr(holder, attr)
        patched[name] = fn.__wrapped__ is _patches.originals[patch.target] and fn.__rbln_patch__ == patch.target
cpu = str(transformers.TrainingArguments(sys.argv[1], use_cpu=True, report_to="none").device)
hits_cpu = {t: n for t, n in _patches.hits.items() if not t.startswith("torch.")}
rbln = str(transformers.TrainingArguments(sys.argv[1], report_to="none").device)
hits = {t: n for t, n in _patches.hits.items() if not t.startswith("torch.")}
print(json.dumps({"patched": patched, "finder": _patches._AfterImport in sys.meta_path, "cpu": cpu, "rbln": rbln,
                  "hits_cpu": hits_cpu, "hits": hits}))
"""


def test_library_patches_install_when_the_module_loads_and_answer_only_for_rbln(tmp_path):
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", LOADED_LATER, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["patched"] and all(result["patched"].values()), result["patched"]
    assert not result["finder"]
    assert result["cpu"] == "cpu" and result["hits_cpu"] == {}, result  # use_cpu: upstream's answer
    assert result["rbln"] == "rbln:0", result
    assert result["hits"] == {"transformers.training_args.TrainingArguments._setup_devices": 1}, result["hits"]


def test_docs_table_is_generated_from_the_list():
    # Regenerate with: python -m torch_rbln._patches --markdown > docs/patches.md
    assert (ROOT / "docs" / "patches.md").read_text() == _patches.markdown()


def test_every_patch_is_described():
    for patch in _patches.PATCHES:
        assert patch.why and patch.upstream and patch.scope in _patches.SCOPES, patch.target
        assert bool(patch.keys) == bool(patch.values) != bool(patch.replacement and patch.applies), patch.target
        assert patch.scoped == (patch.scope != _patches.PROCESS)
        if not patch.keys:
            assert patch.scoped, f"{patch.target}: a replaced function answers only for rbln"


def test_installed_functions_wrap_upstreams(run_python):
    result = run_python("""
        import torch_rbln._inductor
        from torch_rbln import _patches
        torch_rbln._inductor.register()
        out = {}
        for patch in _patches.PATCHES:
            if patch.keys:
                continue
            for name in patch.names:
                holder, attr = _patches.resolve(name)
                fn = getattr(holder, attr)
                out[name] = fn.__wrapped__ is _patches.originals[patch.target] and fn.__rbln_patch__ == patch.target
        print(json.dumps(out))
    """)
    assert result and all(result.values()), result


SCOPED = """
import torch_rbln._inductor
from torch._inductor import config
from torch_rbln import _patches

torch_rbln._inductor.register()


def f(x, w, i):
    # a convolution (layout choice), softmax (loop reordering), int64 where (the backend's dtype fixes)
    y = torch.relu(torch.nn.functional.conv2d(x, w, padding=1)).flatten(1)
    n = torch.arange(y.shape[-1], device=y.device)
    return torch.softmax(y, -1)[i] + torch.where(n > 3, n, 2 * n)


def compile_on(device):
    torch._dynamo.reset()
    args = (torch.randn(2, 4, 6, 6), torch.randn(4, 4, 3, 3), torch.tensor([1, 0]))
    with config.patch(fx_graph_cache=False):
        torch.compile(f)(*(a.to(device) for a in args))
    return dict(_patches.hits)


from torch._subclasses.fake_tensor import FakeTensorMode

with FakeTensorMode():  # a CPU fake convolution (torch.export, torch.compile) takes upstream's layout
    x = torch.randn(1, 4, 6, 6).to(memory_format=torch.channels_last)
    torch.nn.functional.conv2d(x, torch.randn(4, 4, 3, 3))
from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

LinearCrossEntropyOptions._resolve_auto_acc_dtype(torch.float16, torch.device("cpu"))
print(json.dumps({"cpu": compile_on("cpu"), "rbln": compile_on("rbln")}))
"""


def test_scoped_patches_answer_only_for_rbln(run_python):
    hits = run_python(SCOPED, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    assert hits["cpu"] == {}, f"a CPU compile reached rbln's answers: {hits['cpu']}"
    for target in ("torch._inductor.utils.get_current_backend", "torch._inductor.scheduler.BaseSchedulerNode.is_cpu",
                   "torch._inductor.graph.GraphLowering.decide_layout_opt",
                   "torch._C._conv_determine_backend_memory_format"):
        assert hits["rbln"].get(target), (target, hits["rbln"])


@pytest.mark.parametrize("name", ["amp", "memory", "random", "streams"])
def test_submodules_import_as_torch_cuda_s(name):
    import importlib

    import torch

    module = importlib.import_module(f"torch.rbln.{name}")
    assert module is getattr(torch.rbln, name) is getattr(torch_rbln.rbln, name)
