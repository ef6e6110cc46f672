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

.PHONY: install run test bench gpu-test lint format-check typecheck check clean

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

# In parallel (pytest-xdist), one torch thread per worker: two workers of two threads
# each on 2 cores run many times slower than one thread each. TEST_WORKERS=0 runs
# serially (one process, torch's default threads).
TEST_WORKERS ?= auto
test: install
	$(if $(filter 0,$(TEST_WORKERS)),$(PY) -m pytest -q -m "not gpu",OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not gpu" -n $(TEST_WORKERS))

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

check: lint format-check typecheck

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
