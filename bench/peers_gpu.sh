#!/usr/bin/env bash
# Peers on a GPU machine (issue 33, docs/peers.md): vLLM 0.33.0, SGLang 0.5.23 and
# FlashInfer 0.7.2.post1 on CUDA, with no package registry there.
#
# Two steps:
#
#   bash bench/peers_gpu.sh prepare        # HERE (a machine with pip and PyPI): builds
#                                          # .peers-gpu/{vllm,flashinfer}.tar.xz (ignored)
#   bash bench/peers_gpu.sh run vllm       # THERE, carrying .whl, .peers-gpu/vllm.tar.xz
#   bash bench/peers_gpu.sh run flashinfer # THERE, carrying .whl, .peers-gpu/flashinfer.tar.xz
#   bash bench/peers_gpu.sh prepare-sglang-tree  # HERE: .peers-gpu/sglang-tree.tar.xz (issue 34)
#   bash bench/peers_gpu.sh run sglang-tree      # THERE, carrying .whl, .peers-gpu/sglang-tree.tar.xz
#
# What must be carried (the GPU image has Python 3.12, torch 2.11 + CUDA 13, triton 3.6,
# transformers, huggingface_hub, tokenizers, numpy, nvcc; nothing can be fetched):
#   .peers-gpu/vllm/site/     vLLM 0.33.0's Python files only (no compiled extensions, no
#                             vllm-rs binary: the rejection sampler uses neither; its _C*.so
#                             are built for torch 2.14), its METADATA (so the adapter's
#                             version check sees 0.33.0), and
#                             SGLang 0.5.23's one kernel module (sglang/kernels/ops/
#                             speculative/reject_sampling.py) with its dist-info;
#   .peers-gpu/vllm/wheels/   cp312 wheels of vLLM's rejection-sampler import closure that
#                             the image lacks (the list below);
#   .peers-gpu/flashinfer/    flashinfer-python 0.7.2.post1 unpacked without CUTLASS (site/;
#                             JIT-compiled with the image's nvcc on first use) and the cp312
#                             wheels it imports (apache-tvm-ffi, ninja, einops, click,
#                             tabulate).
# Each folder travels as one .tar.xz (prepare packs it), under the device tool's 64 MiB a
# call with the repository and .whl: `prepare` prints the sizes.
# Plus .whl/ with the project's own dependencies, as for bench/gpu_session.sh (carry
# names at most 8 paths: .whl and one .peers-gpu folder per call).
#
# `run` installs the carried files into /tmp/site (PYTHONPATH), then: the peer tests
# (SPECCONFORM_PEERS=1 pytest tests/peers, GPU tests included), the protocols on CUDA at
# their default seeds into docs/evidence/peers/ (unsigned: sign or keep as the lead
# prefers; `specconform verify --skip-signature` recomputes them), and the timing bench.
# Results land in $OUT when set (the device tool's output folder), else /tmp/peers-gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.peers-gpu
PY=${PYTHON:-python3}
step=${1:-}
what=${2:-}

# vLLM's rejection-sampler import closure beyond what the GPU image has (pinned as tested
# on CPU; transformers, huggingface_hub, tokenizers, numpy, pydantic come with the image).
VLLM_CLOSURE="regex==2026.12.2 cbor2==6.3.0 psutil==7.2.2 pyzmq==27.3.0 httpx2==2.17.0
httpcore2==2.17.0 truststore==0.10.5 h11==0.16.0 aiohttp==3.14.5 multidict==7.2.1
attrs==26.1.0 yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
frozenlist==1.8.0 openai-harmony==0.0.8 openai==3.63.0 sniffio==1.3.1 anyio==4.16.0
pybase64==1.5.1 cachetools==8.0.3 msgspec==0.23.0 cloudpickle==3.1.3 uvloop==0.23.0
py-cpuinfo==9.0.0 prometheus_client==0.26.0 fastapi==0.136.3 starlette==1.10.0
annotated-doc==0.0.7 xgrammar==0.2.8 apache-tvm-ffi==0.1.11 partial-json-parser==0.2.1.1.post7
llguidance==1.9.1 cbor2==6.3.0"
FLASHINFER="flashinfer-python==0.7.2.post1"
FLASHINFER_CLOSURE="apache-tvm-ffi==0.1.11 ninja einops click tabulate"

download() {  # cp312 manylinux wheels, no dependencies (each one named)
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux1_x86_64 -d "$1" "${@:2}"
}

if [ "$step" = prepare ]; then
  rm -rf "$ROOT" && mkdir -p "$ROOT/vllm/site" "$ROOT/vllm/wheels" "$ROOT/flashinfer"
  tmp=$(mktemp -d)
  $PY -m pip download -q --no-deps -d "$tmp" "vllm==0.33.0" "sglang==0.5.23"
  # vLLM: its Python files and dist-info only (no compiled extensions, no vllm-rs binary).
  (cd "$tmp" && unzip -q vllm-0.33.0-*.whl 'vllm/*.py' 'vllm-0.33.0.dist-info/*' && \
   unzip -q sglang-0.5.23-*.whl 'sglang/kernels/ops/speculative/reject_sampling.py' \
     'sglang-0.5.23.dist-info/*' && rm -f ./*.dist-info/RECORD)
  cp -r "$tmp"/vllm "$tmp"/vllm-0.33.0.dist-info "$tmp"/sglang "$tmp"/sglang-0.5.23.dist-info \
    "$ROOT/vllm/site/"
  # vllm/platforms/cuda.py imports the compiled vllm._C_stable_libtorch (92 MB, built for
  # torch 2.14) whenever a GPU is visible; the rejection sampler's Triton kernels do not
  # use its ops. An empty module stands in for it (the 2026-12-07 night H100 run stopped
  # at "No module named 'vllm._C_stable_libtorch'"); not yet run on a GPU.
  printf '%s\n' '"""Stand-in for vLLM'"'"'s compiled ops (bench/peers_gpu.sh): the rejection' \
    'sampler under test runs Triton kernels only."""' > "$ROOT/vllm/site/vllm/_C_stable_libtorch.py"
  # shellcheck disable=SC2086
  for spec in $(echo $VLLM_CLOSURE | tr ' ' '\n' | sort -u); do download "$ROOT/vllm/wheels" "$spec"; done
  # FlashInfer: unpacked without CUTLASS (its sampling kernels do not use it; if the JIT
  # build misses a file, `run flashinfer` says which).
  download "$tmp" "$FLASHINFER"
  mkdir -p "$ROOT/flashinfer/site"
  (cd "$ROOT/flashinfer/site" && unzip -q "$tmp"/flashinfer_python-*.whl \
     -x 'flashinfer/data/cutlass/*' 'flashinfer_python-*.dist-info/RECORD' && \
   true)
  # shellcheck disable=SC2086
  for spec in $FLASHINFER_CLOSURE; do download "$ROOT/flashinfer" "$spec"; done
  rm -rf "$tmp"
  # One xz archive per call: the unpacked sources are ~80 MB (vLLM) and ~200 MB
  # (FlashInfer), compressed 29 MB and 18 MB (measured): under the device tool's 64 MiB with the
  # repository (~11 MB) and .whl.
  for peer in vllm flashinfer; do
    tar -C "$ROOT" -cf - "$peer" | xz -6 -T2 > "$ROOT/$peer.tar.xz" && rm -rf "${ROOT:?}/$peer"
  done
  du -sh "$ROOT"/*.tar.xz
  echo "carry .peers-gpu/vllm.tar.xz (vLLM + SGLang) and .peers-gpu/flashinfer.tar.xz in"
  echo "separate calls (each with .whl); each call's carried files + repository < 64 MiB."
  exit 0
fi

# SGLang's tree sampler (issue 34): tree_speculative_sampling_target_only, JIT-built by
# SGLang's own load_jit (apache-tvm-ffi, nvcc) on FlashInfer's headers. sglang's package
# __init__ imports its whole serving runtime, so this carries a source subset: sglang/kernels
# and the few sglang/srt modules load_jit imports (utils, platforms, environ, ...: the
# closure found by importing the kernel module on CPU), with an empty sglang/__init__.py;
# FlashInfer 0.7.2.post1's data/include headers under a stub flashinfer package (load_jit
# finds the headers through find_spec; the other header folders it checks exist, empty: the
# sampling kernel includes none of them); curand's headers (sampling.cuh includes curand.h;
# used through CPATH only where the image's CUDA lacks it); cp312 wheels of the modules the
# subset imports that the image lacks. Checked on the CPU machine: the kernel module imports
# and nvcc 13.0 compiles it for sm_90a (about 90 s on 2 shared cores; only the link needs
# the GPU image's libcudart).
SGLANG_TREE_SRT="srt/utils srt/platforms srt/arg_groups srt/observability srt/plugins
srt/environ.py srt/runtime_context.py"
SGLANG_TREE_WHEELS="apache-tvm-ffi==0.1.11 msgspec==0.23.0 orjson==3.13.0 pybase64==1.5.1
starlette==1.10.0 anyio==4.16.0 sniffio==1.3.1 pyzmq==27.3.0"
if [ "$step" = prepare-sglang-tree ]; then
  dst="$ROOT/sglang-tree"
  rm -rf "$dst" "$ROOT/sglang-tree.tar.xz" && mkdir -p "$dst/site/sglang" "$dst/wheels" "$dst/include"
  tmp=$(mktemp -d)
  $PY -m pip download -q --no-deps -d "$tmp" "sglang==0.5.23"
  (cd "$tmp" && unzip -q sglang-0.5.23-*.whl 'sglang/kernels/*' 'sglang/srt/*' \
     'sglang-0.5.23.dist-info/*' && rm -f sglang-0.5.23.dist-info/RECORD)
  cp -r "$tmp/sglang/kernels" "$dst/site/sglang/"
  : > "$dst/site/sglang/__init__.py"  # the real one imports the serving runtime
  for part in $SGLANG_TREE_SRT; do
    mkdir -p "$dst/site/sglang/$(dirname "$part")" && cp -r "$tmp/sglang/$part" "$dst/site/sglang/$part"
  done
  cp -r "$tmp/sglang-0.5.23.dist-info" "$dst/site/"
  download "$tmp" "$FLASHINFER"
  (cd "$dst/site" && unzip -q "$tmp"/flashinfer_python-*.whl 'flashinfer/data/include/*')
  : > "$dst/site/flashinfer/__init__.py"
  for d in csrc cutlass/include cutlass/tools/util/include spdlog/include; do
    mkdir -p "$dst/site/flashinfer/data/$d"
  done
  $PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-curand"
  (cd "$tmp" && unzip -q nvidia_curand-*.whl 'nvidia/*/include/*' && cp -r nvidia/*/include/. "$OLDPWD/$dst/include/")
  # shellcheck disable=SC2086
  for spec in $SGLANG_TREE_WHEELS; do download "$dst/wheels" "$spec"; done
  rm -rf "$tmp"
  tar -C "$ROOT" -cf - sglang-tree | xz -6 -T2 > "$ROOT/sglang-tree.tar.xz" && rm -rf "$dst"
  du -sh "$ROOT/sglang-tree.tar.xz"
  echo "carry .whl and .peers-gpu/sglang-tree.tar.xz: bash $0 run sglang-tree"
  exit 0
fi

# install: only put the carried peer into /tmp/site (for bench/speed_at_bound.py's peers
# part in the same call: PYTHONPATH=/tmp/site:$PWD); run: install, then tests, protocols
# and timing.
[ "$step" = run ] || [ "$step" = install ] || { echo "usage: $0 prepare | prepare-sglang-tree | run|install vllm|flashinfer|sglang-tree" >&2; exit 2; }
OUTDIR=${OUT:-/tmp/peers-gpu}
mkdir -p "$OUTDIR" /tmp/site
export PYTHONPATH=/tmp/site:$PWD
# The project's own pure-Python dependencies the image lacks (pydantic, cryptography, ...)
# travel as .whl/ exactly as for bench/gpu_session.sh.
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUTDIR/gpu.txt"
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
  | tee -a "$OUTDIR/gpu.txt"
[ -f "$ROOT/$what.tar.xz" ] || { echo "carry $ROOT/$what.tar.xz (bash $0 prepare)" >&2; exit 2; }
mkdir -p /tmp/peerstage && xz -dc "$ROOT/$what.tar.xz" | tar -C /tmp/peerstage -xf -
STAGE=/tmp/peerstage
case "$what" in
  vllm)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$STAGE"/vllm/wheels/*.whl
    cp -r "$STAGE"/vllm/site/* /tmp/site/
    protocols="vllm vllm_kernel sglang sglang_quadrature"
    tests="tests/peers/test_vllm.py tests/peers/test_sglang.py"
    peers="vllm.forward,vllm.accept_kernel,sglang.chain"
    ;;
  flashinfer)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$STAGE"/flashinfer/*.whl
    cp -r "$STAGE"/flashinfer/site/* /tmp/site/
    protocols="flashinfer"
    tests="tests/peers/test_flashinfer.py"
    peers="flashinfer.chain"
    ;;
  sglang-tree)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$STAGE"/sglang-tree/wheels/*.whl
    cp -r "$STAGE"/sglang-tree/site/* /tmp/site/
    # curand.h where the image's CUDA lacks it (searched after the CUDA include folder)
    export CPATH="${CPATH:+$CPATH:}$STAGE/sglang-tree/include"
    # Build the kernel once before the timed runs (SGLang's load_jit, the local GPU's arch).
    $PY -c "import sglang.kernels.ops.speculative.sampling as s; s._jit_sampling_module(4, True)" \
      2>&1 | tail -20 | tee "$OUTDIR/build-sglang-tree.txt"
    protocols="sglang_tree sglang_tree_sampled sglang_tree_duplicates sglang_tree_lossy"
    tests="tests/peers/test_sglang_tree.py"
    peers=""
    ;;
  *) echo "usage: $0 run vllm|flashinfer|sglang-tree" >&2; exit 2 ;;
esac
[ "$step" = install ] && exit 0
SPECCONFORM_PEERS=1 $PY -m pytest -q -p no:cacheprovider $tests 2>&1 | tee "$OUTDIR/tests-$what.txt" || true
for p in $protocols; do
  # The CPU protocols are sized for the interpreter; on CUDA --seeds raises them where the
  # lead wants more power (the protocol marks seeds overridable; the archive records it).
  /usr/bin/time -f "$p: %e s wall" $PY -m specconform run "protocols/peers/$p.yaml" --device cuda \
    --no-sign --out "$OUTDIR/evidence" 2>&1 | tee "$OUTDIR/run-$p.txt" || true
done
[ -n "$peers" ] || exit 0  # sglang-tree: no chain-kernel timing
$PY bench/peer_accept_timing.py --device cuda --rows 4096 --vocab 32000 --draft-k 4 \
  --calls 20 --warmup 3 --peers "$peers" --json "$OUTDIR/timing-$what.json" \
  | tee "$OUTDIR/timing-$what.txt"
# The kernels alone: device tensors staged once, CUDA events (the line above is dominated
# by the adapters' host copies of p and q).
$PY bench/peer_accept_timing.py --device cuda --rows 4096 --vocab 32000 --draft-k 4 \
  --calls 50 --warmup 5 --kernel-only --peers "$peers" --json "$OUTDIR/kernel-$what.json" \
  | tee "$OUTDIR/kernel-$what.txt"
