#!/usr/bin/env bash
# FlashInfer and SGLang's tree sampler in ONE device call (issues 33, 34), from a clean
# snapshot of HEAD (the working tree may hold others' edits). Prepare here:
#   bash bench/peers_gpu.sh prepare && bash bench/peers_gpu.sh prepare-sglang-tree
# then run on the device with carry [.whl, .peers-gpu/flashinfer.tar.xz,
# .peers-gpu/sglang-tree.tar.xz] (about 59 MB with the ~14 MB working tree; a carried
# repo.tar.xz would pass the 64 MiB bound, so the snapshot is taken there, of the
# working tree that travelled):
#   tar --exclude=./.whl --exclude=./.peers-gpu --exclude=./.git -cf - . \
#     | xz -0 -T8 > .peers-gpu/repo.tar.xz && bash bench/peers_gpu_combo.sh
# Results: $OUT/logs.tgz (fi/: FlashInfer, st/: SGLang tree: logs, tests, timings) and
# $OUT/evidence.tgz.part-* (their unsigned archives); each part under its own limit.
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
# What comes back from the device tool: at most 8 files of at most 16 MiB each, 64 MiB in
# all, two folders down (the 2026-12-07 night call's 27 MB peers.tgz did not come back).
# Logs and timings in one small file; the evidence archives in 15 MiB parts
# (cat evidence.tgz.part-* | tar -xz).
cd "$BASE" && tar -czf logs.tgz --exclude='*.zip' fi st \
  && find fi st -name '*.zip' -print0 | tar -czf - --null -T - | split -b 15M - evidence.tgz.part- \
  && rm -rf fi st
ls -la "$BASE"
