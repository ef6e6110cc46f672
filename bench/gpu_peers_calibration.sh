#!/usr/bin/env bash
# One device call that uses both halves of the lab's GPU machine (issues 32, 33, 34):
# the GPU runs FlashInfer and SGLang's tree sampler (bench/peers_gpu_combo.sh, ~560 s),
# while 14 of its 16 CPU cores run real-engine null calibrations of the CI protocols on
# the CPU (bench/calibration_parallel.sh): ci_sequence (CALIB_SEQ_PROCS processes, default 4,
# offsets 70,000,000 + r x span from r = CALIB_SEQ_FIRST) and ci_gate (CALIB_GATE_PROCS, default 10,
# from r = CALIB_GATE_FIRST, default 1000: this machine runs r < 1000 on its own CPU). Carry: [.whl, .peers-gpu/flashinfer.tar.xz,
# .peers-gpu/sglang-tree.tar.xz, .peers-gpu/repo.tar.xz]. Results: $OUT/fi, $OUT/st,
# $OUT/calib/*.csv (+ shard logs).
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
PYTHONPATH= bash bench/peers_gpu_combo.sh
wait
cat "$OUT"/calib/*.txt
