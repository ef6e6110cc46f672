# specconform — developer entry points. Every target that needs the environment
# creates it first, so `make run` and `make test` are each one command on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch is installed first when the venv has no torch: a plain `torch`
# requirement would pull a multi-GB CUDA build. Override on a GPU box, e.g.
#   make install TORCH_SPEC="torch==2.11.0"
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS  ?= -q --disable-pip-version-check

.PHONY: install run test bench gpu-test lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(PIP_FLAGS) "$(TORCH_SPEC)"
	$(PY) -m pip install $(PIP_FLAGS) -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default: the deterministic kernel protocol against the
# bundled engine's sampling core.
run: install
	$(VENV)/bin/specconform run protocols/quadrature.yaml

test: install
	$(PY) -m pytest -q -m "not gpu"

gpu-test: install
	$(PY) -m pytest -q -m gpu

bench: install
	$(PY) bench/run_all.py

lint: install
	$(VENV)/bin/ruff check specconform engine_under_test tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
