#!/usr/bin/env bash
# Real-engine null calibration in parallel processes (issue 32): N shards of
# bench/calibration_real_engine.py appending to one CSV, each under a wall-clock limit,
# then the table. For a many-core host (the lab's GPU machine has 16 CPU cores; the
# engine runs on its CPU here, one thread per process).
#   bash bench/calibration_parallel.sh PROTOCOL OUT_CSV OFFSET_BASE FIRST_RUN RUNS PROCS SECONDS
# Runs r = FIRST_RUN .. FIRST_RUN + RUNS - 1 at offset OFFSET_BASE + r x span; processes
# stopped by the limit leave every finished run in the CSV (appended as each ends).
set -u
protocol=$1 out=$2 base=$3 first=$4 runs=$5 procs=$6 seconds=$7
py=${PYTHON:-python3}
span=$($py -c "import sys; sys.path.insert(0, 'bench'); from calibration_real_engine import seed_span; print(seed_span('$protocol'))")
offsets=$($py -c "print(','.join(str($base + r * $span) for r in range($first, $first + $runs)))")
mkdir -p "$(dirname "$out")"
# The header first, so that no two shards finishing their first run together both write it.
[ -e "$out" ] || $py -c "import sys; sys.path.insert(0, 'bench'); from calibration_real_engine import COLUMNS; print(','.join(COLUMNS))" > "$out"
for k in $(seq 0 $((procs - 1))); do
  OMP_NUM_THREADS=1 timeout "$seconds" $py bench/calibration_real_engine.py "$protocol" \
    --runs 0 --offset-base 0 --offsets "$offsets" --shard "$k/$procs" --resume --out "$out" --keep-failing "${KEEP_FAILING:-$out.failing}" \
    > "$out.shard$k.log" 2>&1 &
done
wait
$py bench/calibration_real_engine.py "$protocol" --runs 0 --offset-base 0 --resume --out "$out" --markdown
