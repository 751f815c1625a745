# The two commands of README.md: `make demo` and `make test`.
# Both create .venv and install the project (editable, with its test and pocl extras)
# when it is missing or older than pyproject.toml, then run. `make test` also installs the
# intel-opencl extra where PoCL cannot compile for the processor.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test suites lint setup clean conformance conformance-gpu stress fuzz explore intel-opencl \
        test-opencl-all opencl-suites oclgrind docs

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,pocl]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tile.cli.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The API reference, from the docstrings, into build/docs (index.html): pdoc, its warnings
# (an annotation it cannot resolve, a name in __all__ that is not there) are errors.
DOCS_MODULES := tile tile.errors tile.reference tile.runtime tile.lang tile.bind tile.grad \
                tile.lower tile.cli semtree

docs: $(STAMP)
	rm -rf build/docs
	$(PY) -W error::UserWarning -m pdoc --output-directory build/docs $(DOCS_MODULES)

# The conformance suites run on each shipped device `tests.shipped` lists: llvm_cpu.0 and the
# tested OpenCL device, opencl.0 (PoCL) or the one TILE_TEST_OPENCL names.
SHARED ?= ../shared
CONFORMANCE := $(SHARED)/conformance/run.py
OPENCL_DEVICE = $(or $(TILE_TEST_OPENCL),opencl.0)

# OpenCL is tested on every host: on PoCL where it compiles for this processor; where it cannot
# (PoCL 3.0's LLVM 14 does not know AMD Zen 5), on Intel's CPU runtime, installed then.
test: lint
	@opencl="$$($(PY) -m tests.shipped --opencl)" || exit 1; \
	if [ "$$opencl" = intel ]; then \
	  echo "PoCL cannot compile for this processor: OpenCL is tested on Intel's CPU runtime"; \
	  $(MAKE) --no-print-directory intel-opencl || exit 1; \
	  export TILE_TEST_OPENCL=opencl:intel; \
	fi; \
	$(MAKE) --no-print-directory suites

# Everything `make test` runs after lint, on the OpenCL device it chose; fails when no OpenCL
# device was tested, so a run never ends green without one. The test suite runs in one worker
# per processor (pytest-xdist), a test file to a worker. Its tests run every conformance case
# on each shipped device, compared by the conformance runner's own `compare_output`
# (tests/backends/test_agreement.py), and on the OpenCL device with the GPU settings forced
# (tests/gpu/test_pocl.py): what `make conformance` does through `run.py` itself.
TEST_WORKERS ?= auto

suites: $(STAMP)
	$(MAKE) --no-print-directory docs
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	MPLBACKEND=Agg $(PY) -m pytest --nbmake notebooks -q -n $(TEST_WORKERS)
	devices="$$($(PY) -m tests.shipped)" || exit 1; \
	case "$$devices" in *opencl*) ;; *) echo "no OpenCL device was tested" >&2; exit 1;; esac

# The conformance suites through the conformance runner, on each shipped device, then on the
# tested OpenCL device with the GPU settings forced.
conformance: $(STAMP)
	devices="$$($(PY) -m tests.shipped)" || exit 1; \
	for device in $$devices; do \
	  $(PY) $(CONFORMANCE) $(SHARED)/conformance/cases --device $$device && \
	  $(PY) $(CONFORMANCE) $(SHARED)/spec/cases --device $$device || exit 1; \
	done
	$(MAKE) --no-print-directory conformance-gpu

# The conformance suites on the tested OpenCL device with the GPU settings forced (GPU-style
# kernels on a CPU device).
conformance-gpu: $(STAMP)
	TILE_FORCE_GPU_SETTINGS=1 $(PY) $(CONFORMANCE) $(SHARED)/conformance/cases --device $(OPENCL_DEVICE)
	TILE_FORCE_GPU_SETTINGS=1 $(PY) $(CONFORMANCE) $(SHARED)/spec/cases --device $(OPENCL_DEVICE)

# Intel's CPU OpenCL runtime (~800 MB), registered with pyopencl's loader at first use.
$(VENV)/.intel-opencl: $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,pocl,intel-opencl]"
	touch $@

intel-opencl: $(VENV)/.intel-opencl

# The OpenCL suites (the OpenCL tests, the conformance suites with and without the GPU
# settings) on PoCL, where it compiles for this processor, and on Intel's CPU runtime.
OPENCL_TESTS := tests/opencl tests/gpu tests/backends tests/hal tests/fuzz tests/test_stress.py

test-opencl-all: lint intel-opencl
	@platforms=intel; \
	if [ "$$($(PY) -m tests.shipped --opencl)" = pocl ]; then platforms="pocl intel"; \
	else echo "WARNING: PoCL cannot compile for this processor: Intel's runtime only" >&2; fi; \
	for platform in $$platforms; do \
	  echo "== the OpenCL suites on opencl:$$platform"; \
	  TILE_TEST_OPENCL=opencl:$$platform $(MAKE) --no-print-directory opencl-suites || exit 1; \
	done

opencl-suites: $(STAMP)
	$(PY) -m pytest -q $(OPENCL_TESTS)
	$(PY) $(CONFORMANCE) $(SHARED)/conformance/cases --device $(OPENCL_DEVICE)
	$(PY) $(CONFORMANCE) $(SHARED)/spec/cases --device $(OPENCL_DEVICE)
	$(MAKE) --no-print-directory conformance-gpu

# The conformance and spec suites on Oclgrind, an OpenCL emulator that checks every access,
# with its API and data-race checks on: any report fails (tests/oclgrind.py).
$(VENV)/.oclgrind: $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,pocl,oclgrind]"
	touch $@

oclgrind: $(VENV)/.oclgrind
	$(PY) -m tests.oclgrind --shared $(SHARED)

# Many short processes per device that exit in every state (calls running, results just read,
# threads done): none may exit abnormally (tests/stress.py; `make test` runs a short form).
STRESS_PROCESSES ?= 500

stress: $(STAMP)
	$(PY) -m tests.stress --processes $(STRESS_PROCESSES)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The differential fuzzer's long pass: FUZZ_CASES random programs per target (llvm_cpu.0,
# opencl.0, opencl.0 with the GPU settings forced) against tile.reference; a failure prints
# its one-line reproducer. `make test` runs a quick pass (tests/fuzz/test_fuzz.py).
FUZZ_CASES ?= 10000
FUZZ_SEED ?= 20261125

fuzz: $(STAMP)
	$(PY) -m tests.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

# The property tests with new random examples on each run (`make test` draws fixed ones).
explore: $(STAMP)
	TILE_HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q $$(grep -rl --include="test_*.py" "from hypothesis" tests)
