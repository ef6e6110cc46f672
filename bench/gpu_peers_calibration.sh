#!/usr/bin/env bash
# One device call that uses both halves of the lab's GPU machine (issues 32, 33, 34):
# the GPU runs FlashInfer and SGLang's tree sampler (bench/peers_gpu_combo.sh, ~560 s),
# while 14 of its 16 CPU cores run real-engine null calibrations of the CI protocols on
# the CPU (bench/calibration_parallel.sh): ci_sequence (CALIB_SEQ_PROCS processes, default 4,
# offsets 70,000,000 + r x span from r = CALIB_SEQ_FIRST) and ci_gate (CALIB_GATE_PROCS, default 10,
# from r = CALIB_GATE_FIRST, default 1000: this machine runs r < 1000 on its own CPU). Carry: [.whl, .peers-gpu/flashinfer.tar.xz,
# .peers-gpu/sglang-tree.tar.xz, .peers-gpu/repo.tar.xz]. Results: $OUT/fi, $OUT/st,
# $OUT/calib/*.csv (+ shard logs; archives of runs not PASS in *.failing/).
# Also: REPRO="PROTOCOL:OFFSET ..." reruns those cases on the CPU keeping their archives
# ($OUT/repro: how a calibration FAIL looks on this host's kernels); GPU_TESTS=1 runs the
# engine's GPU tests and the refill bits check after the peers (issue 38). Everything
# SPEED_PARTS="engine,kernels" runs bench/speed_at_bound.py's parts after them ($OUT/speed).
# Everything but large archives comes back as ONE file, $OUT/results.tar.xz (the device
# returns at most 8 files of at most 16 MiB; the FlashInfer archive alone passed that).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT/calib"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHON=python3
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
nproc
limit=${CALIB_SECONDS:-540}
bash bench/calibration_parallel.sh protocols/ci_sequence.yaml "$OUT/calib/ci_sequence_real.csv" \
  70000000 "${CALIB_SEQ_FIRST:-0}" 2000 "${CALIB_SEQ_PROCS:-4}" "$limit" > "$OUT/calib/seq.txt" 2>&1 &
if [ "${CALIB_GATE_PROCS:-10}" -gt 0 ]; then
  bash bench/calibration_parallel.sh protocols/ci_gate.yaml "$OUT/calib/ci_gate_real.csv" \
    50000000 "${CALIB_GATE_FIRST:-1000}" 3000 "${CALIB_GATE_PROCS:-10}" "$limit" > "$OUT/calib/gate.txt" 2>&1 &
fi
for case in ${REPRO:-}; do
  mkdir -p "$OUT/repro"
  OMP_NUM_THREADS=1 python3 -m specconform run "${case%%:*}" --offset "${case##*:}" --no-sign \
    --out "$OUT/repro" > "$OUT/repro/${case##*:}.txt" 2>&1 &
done
PYTHONPATH= bash bench/peers_gpu_combo.sh
if [ "${GPU_TESTS:-0}" = 1 ]; then
  mkdir -p "$OUT/gpu"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/engine/test_refill_early.py \
    tests/engine/test_engine_trace.py > "$OUT/gpu/tests.txt" 2>&1; echo "gpu tests rc=$?"
  timeout 120 python3 bench/refill_packing_bits.py --device cuda --dtype bfloat16 \
    > "$OUT/gpu/refill_bits.txt" 2>&1; echo "refill bits rc=$?"
  tail -5 "$OUT/gpu/tests.txt" "$OUT/gpu/refill_bits.txt"
fi
if [ -n "${SPEED_PARTS:-}" ]; then
  mkdir -p "$OUT/speed"
  python3 bench/speed_at_bound.py --parts "$SPEED_PARTS" --json "$OUT/speed/speed.json" \
    > "$OUT/speed/speed.txt" 2>&1; echo "speed rc=$?"; tail -30 "$OUT/speed/speed.txt"
fi
wait
cat "$OUT"/calib/*.txt
for f in "$OUT"/repro/*.txt; do [ -e "$f" ] && tail -n 12 "$f"; done
# Pack the results (text, tables, archives) and drop the rest (build trees, wheels).
(cd "$OUT" && find . -type f \( -name '*.txt' -o -name '*.csv' -o -name '*.log' -o -name '*.json' \
    -o -name '*.md' -o \( -name '*.zip' -size -4M \) \) -print0 \
  | tar -cJf /tmp/results.tar.xz --null -T - && find . -mindepth 1 -delete \
  && mv /tmp/results.tar.xz results.tar.xz && ls -la)
