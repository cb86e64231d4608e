"""The vendor seam (docs/porting.md) and the folders' include rules, checked on the tree's sources.

A vendor replaces runtime/driver/ and kernels/ and keeps the rest, so:
runtime/ includes nothing from kernels/ and from generated/ only the declared kernel contract; the
driver includes no torch and nothing from above it; outside runtime/ no code names `driver::` or
includes a driver header (it goes through the glue); the Python module reaches kernels only through
the contract; the driver's public headers show only what a vendor implements (no launch-ring
internals). Every folder of runtime/ and kernels/ states what it may include (FOLDER_RULES), so a new
capability or family lands in a folder of its own with its rules written down.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (".h", ".cpp", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
DRIVER_USE = re.compile(r"\bdriver::")
DRIVER_HEADER = "runtime/driver/rbln_driver.h"
DRIVER_HEADERS = (DRIVER_HEADER, "runtime/driver/activity.h")  # activity records, for profilers


def sources(*dirs: str, recursive: bool = True) -> list[Path]:
    files = []
    for d in dirs:
        pattern = "**/*" if recursive else "*"
        files += [p for p in sorted((ROOT / d).glob(pattern)) if p.suffix in SOURCES]
    assert files, f"no C++ sources under {dirs}"  # a moved directory must not make the rules vacuous
    return files


def code(text: str) -> str:
    """The text without comments and string literals (a comment may name driver:: freely)."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', " ", text, flags=re.S)


def includes(path: Path) -> list[str]:
    return INCLUDE.findall(path.read_text())


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# The registry's declarations, the glue's own kernels (rbln::copy_, rbln::empty_strided) among them: only ATen
# types, no kernel header.
DECLARATIONS = "generated/RBLNNativeFunctions.h"


def test_runtime_includes_nothing_from_kernels_or_generated():
    bad = [(rel(p), h) for p in sources("runtime") for h in includes(p)
           if h.startswith(("kernels/", "generated/")) and h != DECLARATIONS]
    assert not bad, f"the glue a vendor keeps must not depend on the kernels it replaces: {bad}"
    assert not [h for h in includes(ROOT / DECLARATIONS) if h.startswith(("kernels/", "runtime/"))]


def test_driver_depends_on_no_torch_and_nothing_above_it():
    bad = [(rel(p), h) for p in sources("runtime/driver") for h in includes(p)
           if h.split("/")[0] in ("ATen", "c10", "torch", "kernels", "generated", "python")
           or (h.startswith("runtime/") and not h.startswith("runtime/driver/"))]
    assert not bad, bad


def test_glue_uses_only_the_drivers_public_headers():
    glue = [p for p in sources("runtime") if "driver" not in p.relative_to(ROOT / "runtime").parts]
    bad = [(rel(p), h) for p in glue for h in includes(p) if h.startswith("runtime/driver/") and h not in DRIVER_HEADERS]
    assert not bad, bad
    # The glue is what reaches the driver: the check above must be looking at real users of it.
    assert any(DRIVER_HEADER in includes(p) for p in glue)


@pytest.mark.parametrize("tree", ["kernels", "generated", "python/csrc"])
def test_code_outside_the_glue_reaches_the_driver_through_it(tree):
    files = sources(tree)
    bad_includes = [(rel(p), h) for p in files for h in includes(p) if h.startswith("runtime/driver/")]
    bad_uses = [f"{rel(p)}:{code(p.read_text())[:m.start()].count(chr(10)) + 1}"
                for p in files for m in DRIVER_USE.finditer(code(p.read_text()))]
    assert not bad_includes and not bad_uses, (
        f"{tree} must call the glue (runtime/device/RBLNFunctions.h), not the driver: "
        f"includes {bad_includes}, driver:: at {bad_uses}")


@pytest.mark.parametrize("header", DRIVER_HEADERS)
def test_driver_headers_show_only_what_a_vendor_implements(header):
    text = code((ROOT / header).read_text())
    assert "namespace detail" not in text, "launch-ring internals belong in runtime/driver/*.cpp"
    assert not re.search(r"\bconstexpr\s+(?:size_t|u?int\w*|unsigned|long|auto|bool|double|float)\b", text), \
        "ring sizes and other tuning constants are the driver's own"
    if header != DRIVER_HEADER:
        assert "template" not in text
        return
    # Templates only type-erase a callable for the one non-template launch().
    declared = re.findall(r"template\s*<[^>]*>\s*(?:struct|class|void|inline)?\s*(\w+)", text)
    assert declared and set(declared) <= {"TaskOf", "launch"}, declared
    assert re.search(r"\bvoid\s+launch\s*\(\s*Stream\s*\*\s*\w+\s*,\s*const\s+char\s*\*\s*\w+\s*,\s*void\s*\*", text), \
        "the non-template launch(stream, name, callable, type) a vendor implements"


@pytest.mark.parametrize("snippet,found", [
    ("x = rbln::driver::device_capacity(0);", True),
    ("driver::memcpy_async(d, s, n, stream);", True),
    ("// driver::memcpy_async is queued\nx = 1;", False),
    ('m.doc() = "driver::x";', False),
    ("driver_call([&] { f(); });", False),
])
def test_driver_use_scan(snippet, found):
    assert bool(DRIVER_USE.search(code(snippet))) == found


# What each folder may include besides its own files and system, torch and standard headers (prefixes of
# project paths). Kernels use the glue's public services; one kernel family uses another only where listed.
GLUE_FOR_KERNELS = ("runtime/device/", "runtime/fallback/", "runtime/observability/")
KERNEL_BASE = ("kernels/common/", "kernels/vec/", "kernels/library/", DECLARATIONS, *GLUE_FOR_KERNELS)
FOLDER_RULES = {
    # The vendor's side: the emulated NPU, nothing above it.
    "runtime/driver": (),
    # The glue, by capability: the device (guard, hooks, generator, the ATen minimum) over the driver; the
    # others over the device. The contract is how the glue reaches the kernels (the device copy).
    "runtime/device": ("runtime/driver/", "runtime/fallback/", "runtime/observability/", DECLARATIONS),
    "runtime/memory": ("runtime/device/", "runtime/observability/"),
    "runtime/streams": ("runtime/device/",),
    "runtime/distributed": ("runtime/device/",),
    "runtime/observability": ("runtime/device/", *DRIVER_HEADERS),
    "runtime/compiled": ("runtime/device/", "runtime/fallback/", "runtime/observability/", DECLARATIONS),
    "runtime/fallback": ("runtime/observability/", DECLARATIONS),
    # Graph capture: the driver's capture under at::GraphImplInterface, the allocator's pools, the generator.
    "runtime/graphs": ("runtime/device/", "runtime/memory/"),
    # Kernels: shared helpers, the vectorized loops, the op library, then one folder per op family.
    "kernels/common": ("runtime/device/", DECLARATIONS),
    "kernels/vec": (),
    "kernels/library": ("kernels/common/", *GLUE_FOR_KERNELS),
    "kernels/elementwise": KERNEL_BASE,
    "kernels/reduction": KERNEL_BASE,
    "kernels/linalg": (*KERNEL_BASE, "kernels/elementwise/"),
    "kernels/nn": (*KERNEL_BASE, "kernels/linalg/"),  # convolution's im2col + BLAS gemm
    "kernels/indexing": KERNEL_BASE,
    "kernels/random": KERNEL_BASE,
    "kernels/spectral": KERNEL_BASE,
    "kernels/quantized": KERNEL_BASE,
    "kernels/optim": KERNEL_BASE,
    # The Python module binds the glue, and reaches the kernels only through the contract.
    "python/csrc": tuple(f"runtime/{c}/" for c in ("device", "memory", "streams", "distributed", "observability",
                                                     "compiled", "fallback", "graphs")) + (DECLARATIONS,),
    # The generated registrations: the elementwise engine and functors, the op library, the glue's hooks.
    "generated": (DECLARATIONS, "kernels/common/", "kernels/elementwise/", "kernels/library/", "runtime/compiled/",
                  "runtime/fallback/"),
}
PROJECT_ROOTS = ("runtime/", "kernels/", "generated/", "python/")


def folders(top: str) -> list[str]:
    return sorted(rel(p) for p in (ROOT / top).iterdir() if p.is_dir())


def test_every_folder_states_its_include_rules():
    present = set(folders("runtime") + folders("kernels"))
    ruled = {f for f in FOLDER_RULES if f.startswith(("runtime/", "kernels/"))}
    assert present == ruled, f"folders without rules: {present - ruled}; rules without a folder: {ruled - present}"
    assert not [p for top in ("runtime", "kernels") for p in (ROOT / top).iterdir() if p.suffix in SOURCES], \
        "sources live in a capability or family folder, not at the top of runtime/ or kernels/"


@pytest.mark.parametrize("folder", sorted(FOLDER_RULES))
def test_folder_includes_only_what_its_rules_allow(folder):
    bad = [(rel(p), h) for p in sources(folder) for h in includes(p)
           if h.startswith(PROJECT_ROOTS) and not h.startswith(f"{folder}/") and not h.startswith(FOLDER_RULES[folder])]
    assert not bad, f"{folder} may include {FOLDER_RULES[folder]}: {bad}"


def test_include_rule_scan_sees_violations():
    """The rule check is not vacuous: a kernel family including another family's header, or the glue a
    kernel header, is caught."""
    def allowed(folder, header):
        return not header.startswith(PROJECT_ROOTS) or header.startswith((f"{folder}/", *FOLDER_RULES[folder]))
    assert not allowed("kernels/random", "kernels/nn/Window.h")
    assert not allowed("runtime/memory", "kernels/common/Common.h")
    assert not allowed("python/csrc", "kernels/nn/Convolution.cpp")
    assert allowed("kernels/nn", "kernels/linalg/Blas.h") and allowed("runtime/memory", "runtime/device/RBLNFunctions.h")


def test_codegen_inputs_from_kernels_rerun_codegen():
    """codegen reads argument checks from kernel headers: the build must rerun it when they change."""
    from codegen.gen import KERNEL_HEADERS

    cmake = (ROOT / "CMakeLists.txt").read_text()
    inputs = re.search(r"list\(APPEND RBLN_CODEGEN_INPUTS ([^)]*)\)", cmake)
    assert inputs, "CMakeLists.txt lists the kernel headers codegen reads"
    listed = {p.replace("${CMAKE_SOURCE_DIR}/", "") for p in inputs.group(1).split()}
    assert set(KERNEL_HEADERS) <= listed, set(KERNEL_HEADERS) - listed
    assert all((ROOT / h).is_file() for h in KERNEL_HEADERS)
