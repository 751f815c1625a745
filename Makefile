# The two commands of README.md: `make demo` and `make test`.
# Both create .venv and install the project (editable, with its test and pocl extras)
# when it is missing or older than pyproject.toml, then run.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup clean conformance-gpu stress fuzz

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,pocl]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tile.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# The conformance suites run on each shipped device `tests.shipped` lists: both, except on a
# processor PoCL's LLVM cannot target, where it warns and leaves opencl.0 out (see there).
SHARED ?= ../shared
CONFORMANCE := $(SHARED)/conformance/run.py

test: lint
	$(PY) -m pytest -q
	MPLBACKEND=Agg $(PY) -m pytest --nbmake notebooks -q
	devices="$$($(PY) -m tests.shipped)" || exit 1; \
	for device in $$devices; do \
	  $(PY) $(CONFORMANCE) $(SHARED)/conformance/cases --device $$device && \
	  $(PY) $(CONFORMANCE) $(SHARED)/spec/cases --device $$device || exit 1; \
	done; \
	case "$$devices" in *opencl.0*) $(MAKE) --no-print-directory conformance-gpu;; esac

# The conformance suites on opencl.0 with the GPU settings forced (GPU-style kernels on PoCL).
conformance-gpu: $(STAMP)
	TILE_FORCE_GPU_SETTINGS=1 $(PY) $(CONFORMANCE) $(SHARED)/conformance/cases --device opencl.0
	TILE_FORCE_GPU_SETTINGS=1 $(PY) $(CONFORMANCE) $(SHARED)/spec/cases --device opencl.0

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
