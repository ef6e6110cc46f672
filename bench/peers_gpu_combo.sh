#!/usr/bin/env bash
# FlashInfer and SGLang's tree sampler in ONE device call (issues 33, 34), from a clean
# snapshot of HEAD (the working tree may hold others' edits). Prepare here:
#   bash bench/peers_gpu.sh prepare && bash bench/peers_gpu.sh prepare-sglang-tree
#   git archive HEAD | xz -3 -T2 > .peers-gpu/repo.tar.xz
# then run on the device with carry [.whl, .peers-gpu/flashinfer.tar.xz,
# .peers-gpu/sglang-tree.tar.xz, .peers-gpu/repo.tar.xz] (about 51 MB with the tree):
#   bash bench/peers_gpu_combo.sh
# Results: $OUT/fi (FlashInfer) and $OUT/st (SGLang tree), each with its log, tests,
# unsigned archives (evidence/) and timings; each part under its own time limit.
set -u
mkdir -p /tmp/clean/.peers-gpu && xz -dc .peers-gpu/repo.tar.xz | tar -C /tmp/clean -xf - \
  && cp -r .whl /tmp/clean/ \
  && cp .peers-gpu/flashinfer.tar.xz .peers-gpu/sglang-tree.tar.xz /tmp/clean/.peers-gpu/
cd /tmp/clean || exit 2
BASE=${OUT:-/tmp/peers-gpu}
mkdir -p "$BASE/fi" "$BASE/st"
# PEERS: which of the two to run (default both); FI_LIMIT, ST_LIMIT: their time limits (s).
# SGLang's tree first: its stub flashinfer package (headers only) is then overwritten by
# the real one, which a later call on the same warm machine (speed_at_bound's peers part)
# imports with its JIT cache.
if [[ " ${PEERS:-flashinfer sglang-tree} " == *" sglang-tree "* ]]; then
  OUT=$BASE/st timeout "${ST_LIMIT:-260}" bash bench/peers_gpu.sh run sglang-tree > "$BASE/st/log.txt" 2>&1
  echo "sglang-tree rc=$?"; tail -25 "$BASE/st/log.txt"
fi
rm -rf /tmp/peerstage
if [[ " ${PEERS:-flashinfer sglang-tree} " == *" flashinfer "* ]]; then
  OUT=$BASE/fi timeout "${FI_LIMIT:-300}" bash bench/peers_gpu.sh run flashinfer > "$BASE/fi/log.txt" 2>&1
  echo "flashinfer rc=$?"; tail -25 "$BASE/fi/log.txt"
fi
