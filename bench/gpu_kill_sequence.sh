#!/usr/bin/env bash
# The ci_sequence kill matrix on one GPU: 8 processes of bench/kill_matrix_sequence.py
# side by side (the tiny model leaves the H200 mostly idle), 200 replications per bug,
# one JSON line per bug in $OUT/km-<i>.jsonl; then the Markdown table from all lines, and
# every line in one file ($OUT/kill-ci_sequence.jsonl, the logs in kill-ci_sequence.log):
# the device tool brings back at most 8 files, so the 16 per-process files are merged.
# Usage (device tool, repository root): bash bench/gpu_kill_sequence.sh [limit_s]
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; LIMIT=${1:-540}; REPS=${REPS:-200}
mk() {
  local i=$1; shift
  timeout "$LIMIT" python3 bench/kill_matrix_sequence.py protocols/ci_sequence.yaml \
    --device cuda --replications "$REPS" --jsonl "$OUT/km-$i.jsonl" "$@" > "$OUT/km-$i.log" 2>&1
}
mk 0 --mutants async_stale_input bf16_q &
mk 1 --no-clean --mutants bonus_after_accepts bonus_off_by_one bonus_params &
mk 2 --no-clean --mutants deep_position_temp draft_raw_q filter_order_temp &
mk 3 --no-clean --mutants greedy_draft greedy_row_sampled late_round_residual &
mk 4 --no-clean --mutants nan_target_once next_input_partial no_draft_probs &
mk 5 --no-clean --mutants residual_from_p residual_inplace rng_reused_rounds &
mk 6 --no-clean --mutants rng_shared_requests shared_rng shared_uniform &
mk 7 --no-clean --mutants slot_stale_params target_default_params top_p_drop_crossing &
wait
python3 bench/kill_matrix_sequence.py protocols/ci_sequence.yaml --device cuda \
  --from-jsonl "$OUT"/km-*.jsonl --out "$OUT/kill-ci_sequence.md"
cat "$OUT"/km-*.jsonl > "$OUT/kill-ci_sequence.jsonl"
tail -n +1 "$OUT"/km-*.log > "$OUT/kill-ci_sequence.log"
rm -f "$OUT"/km-*.jsonl "$OUT"/km-*.log
