#!/usr/bin/env bash
# One batched GPU session (the lab's device tool runs this from the repository root with
# $OUT as the folder that comes back). Records versions, runs the GPU tests, the sampling
# and engine benchmarks, fp32_t2 at 5,000 seeds, and the fp32_t2 kill matrix.
#
# Usage: bash bench/gpu_session.sh [part...]
#   parts: env tests bench sweep fp32 shard kill kill2 bonus killci engine engine_small engine_ouro
#          perf (the performance kind's A/B: protocols/performance.yaml, ~9 min)
#          seqtol (what sequence.yaml's tolerances rest on: bench/sequence_tolerances.py, ~2 min)
#          sequence (protocols/sequence.yaml to a verdict, ~6 min estimated)
#          seqkill (the ci_sequence kill matrix, bench/gpu_kill_sequence.sh, ~9 min)
#          fp32seq (fp32_t2 --sequential at 5,000 seeds)
#          fp32ab (fp32_t2 5k cold, three times warm, then 20,000 seeds warm)
#          profile_ouro (the profile part's ouro-1.4b rows only)
#          fp32prof (cProfile of one fp32_t2 5k run: where the host's time goes)
#          timeline (issue 16: host ms per phase of the graphed steady-state run, nospec
#                    vs async, and CUDA runtime calls per step: bench/host_timeline.py)
#          coldstart (issue 16: import, first CUDA call, model build in fresh processes)
#          profile (issue 16: per-phase device time and kernels of one round, nospec vs
#                   async, small and ouro-1.4b at c = 64 and 1,024: bench/round_profile.py)
#          (sweep: launch configurations of the probabilities kernel, SWEEP_CONFIGS)
#          (kill2: the kill matrix in 2 processes; bonus: extra kill rows, BONUS_MUTANTS)
#          tests+kill   GPU tests and the fp32_t2 kill matrix side by side (neither is
#                       timed, so they may share the GPU); timed parts always run alone.
# Every part runs under its own time limit (LIMIT_<part>, else PART_LIMIT seconds,
# default 420) so that one
# slow part cannot take the others' output with it; the whole log is tee'd to
# $OUT/session.log, which comes back even when the call is cut short.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CI=true
LIMIT=${PART_LIMIT:-420}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
else
  export PYTHONPATH=$PWD
fi
exec > >(tee -a "$OUT/session.log") 2>&1
log() { echo "=== $* ($(date -u +%H:%M:%S))"; }
# The limit of the part now running: LIMIT_<part> (e.g. LIMIT_fp32=90) or PART_LIMIT.
lim() {
  local var="LIMIT_${PART//[^a-zA-Z0-9]/_}"
  timeout --kill-after=10 "${!var:-$LIMIT}" "$@"; local rc=$?
  [ $rc -eq 0 ] || echo "!!! rc=$rc: $*"
}

part_env() {
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'gpu', torch.cuda.get_device_name(0))"
  # Whether this image keeps Python bytecode (session 9: it does not, and every process
  # compiled torch from source; specconform run then caches it under OUT/.cache/pycache).
  python3 -c "import sys; from specconform.runner.caches import _installed_without_bytecode as f; print('bytecode: dont_write', sys.flags.dont_write_bytecode, 'prefix', sys.pycache_prefix, 'torch without bytecode', f())"
}
part_tests() {
  lim python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/ 2>&1 | tail -40
}
part_bench() {
  # The first call also prints the accept/categorical table at B = 1, 64, 4096 (torch vs
  # Triton, floors, ratios) and exits 1 when a Triton result differs from the torch path.
  lim python3 bench/sampling_core.py --device cuda --rows 1024 --vocab 49152 \
    --sweep "" BLOCK=1024,num_warps=4 BLOCK=2048,num_warps=4 --json "$OUT/sampling-core.json"
  lim python3 bench/sampling_core.py --device cuda --rows 64 --vocab 49152 --sampling-rows 0 \
    | tail -3
}
part_sweep() {
  local configs=("" "PREFETCH=0" "BLOCK=8192" "BLOCK=8192,PREFETCH=0" "num_warps=4"
                 "maxnreg=96" "maxnreg=0" "BLOCK=2048,num_warps=4")
  [ -n "${SWEEP_CONFIGS:-}" ] && read -ra configs <<< "$SWEEP_CONFIGS"
  lim python3 bench/probs_kernel_sweep.py --json "$OUT/probs-sweep.json" "${configs[@]}"
}
fp32_once() {
  # One fp32_t2 run (label, seeds): wall clock, peak RSS, the timing: lines.
  local label=$1 seeds=$2
  echo "--- fp32_t2 ${seeds}, $label"
  /usr/bin/time -v python3 -m specconform run protocols/fp32_t2.yaml \
    --seeds "$seeds" --offset 2e6 --out "$OUT/runs" --ledger "$OUT/ledger-$label-$seeds-$RANDOM.jsonl" --no-sign \
    --verbose 2>"$OUT/fp32_time.txt" | grep -E "^result|^error"
  grep -E "Elapsed|Maximum resident" "$OUT/fp32_time.txt"
  grep -E "^timing|^error" "$OUT/fp32_time.txt"
}
part_fp32() {
  # Cold (a fresh process on this machine: imports, Triton compiles) then warm (the same
  # command again, the Triton cache now filled); --verbose prints the timing: breakdown.
  lim bash -c "$(declare -f fp32_once); OUT=$OUT; fp32_once cold 5000; fp32_once warm 5000"
  mv "$OUT"/runs/*.zip "$OUT/" 2>/dev/null; rm -rf "$OUT/runs" "$OUT"/ledger-*.jsonl*
}
part_fp32ab() {
  # Issue 16, part 3: a cold run (this machine's first: Triton compiles), then warm runs
  # (new processes, the caches in OUT/runs/.cache kept), then 20,000 seeds.
  LIMIT_fp32ab=${LIMIT_fp32ab:-400}
  lim bash -c "$(declare -f fp32_once); OUT=$OUT; fp32_once cold 5000
    for i in 1 2 3; do fp32_once warm 5000; done; fp32_once warm 20000"
  rm -rf "$OUT/runs" "$OUT"/ledger-*.jsonl*
}
part_profile_ouro() {
  lim python3 bench/round_profile.py --device cuda --preset ouro-1.4b --concurrency "${PROFILE_OURO_CONC:-64,1024}" --modes "${PROFILE_MODES:-nospec,async}" \
    --json "$OUT/profile-ouro.json" 2>&1 | grep -v "^USDT\|^STAGE"
}
part_fp32prof() {
  # Where fp32_t2's wall time goes on the host: cProfile of one 5k run (device time
  # shows up where the host waits on it), top functions by own and cumulative time.
  lim python3 -m cProfile -o "$OUT/fp32.prof" -m specconform run protocols/fp32_t2.yaml \
    --seeds 5000 --offset 2e6 --out "$OUT/prof" --ledger "$OUT/prof.jsonl" --no-sign \
    > /dev/null 2>&1
  python3 -c "import pstats; s = pstats.Stats('$OUT/fp32.prof'); \
s.sort_stats('tottime').print_stats(35); s.sort_stats('cumulative').print_stats(60)" \
    | grep -vE "^\s*$" | cut -c1-160
  rm -rf "$OUT/prof" "$OUT/prof.jsonl"
}
part_kill() {
  lim python3 bench/kill_matrix_engine.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 \
    --device cuda --out "$OUT/kill-fp32_t2.md" 2>&1 | grep -v "^generate\|^reference"
}
part_kill2() {
  # The fp32_t2 kill matrix in two processes side by side (one engine of about 45 GiB
  # each at 5,000 seeds; runs are latency-bound, so two share the GPU well).
  local half=(greedy_draft target_default_params draft_raw_q residual_inplace no_draft_probs bonus_params)
  local rest=(bf16_q shared_rng async_stale_input residual_from_p bonus_off_by_one shared_uniform)
  lim python3 bench/kill_matrix_engine.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 \
    --device cuda --mutants "${half[@]}" --out "$OUT/kill-fp32_t2-a.md" > "$OUT/.kill-a.log" 2>&1 &
  local a=$!
  lim python3 bench/kill_matrix_engine.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 \
    --device cuda --no-clean --mutants "${rest[@]}" --out "$OUT/kill-fp32_t2-b.md" 2>&1 \
    | grep -v "^generate\|^reference"
  wait $a; grep -v "^generate\|^reference" "$OUT/.kill-a.log"; rm -f "$OUT/.kill-a.log"
}
part_bonus() {
  # One more fp32_t2 kill-matrix row (the mutant the split run did not reach).
  lim python3 bench/kill_matrix_engine.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 \
    --device cuda --no-clean --mutants ${BONUS_MUTANTS:-bonus_params} \
    --out "$OUT/kill-fp32_t2-c.md" 2>&1 | grep -v "^generate\|^reference"
}
part_killci() {
  lim python3 bench/kill_matrix_engine.py protocols/ci_gate.yaml --device cuda \
    --out "$OUT/kill-ci_gate.md" 2>&1 | grep -v "^generate\|^reference"
}
engine_preset() {
  local preset=$1; shift
  lim python3 bench/engine_throughput.py --device cuda --preset "$preset" \
    --max-tokens "${ENGINE_TOKENS:-128}" --concurrency "${ENGINE_CONCURRENCY:-1,4,64,1024}" \
    --json "$OUT/engine-$preset.json" ${ENGINE_ARGS:-} "$@"  # e.g. ENGINE_ARGS="--kinds random"
}
part_shard() {
  # Issue 17: fp32_t2 at 5,000 seeds from one process and from two processes sharing
  # the one GPU; raw data and results must be byte-identical.
  local args=(protocols/fp32_t2.yaml --seeds 5000 --offset 5e6 --no-sign)
  lim /usr/bin/time -f "one process: %e s" python3 -m specconform run "${args[@]}" \
    --out "$OUT/shard1" --ledger "$OUT/shard1.jsonl" 2>&1 | grep -E "^result|^timing|one process"
  lim /usr/bin/time -f "two processes: %e s" python3 -m specconform run "${args[@]}" \
    --out "$OUT/shard2" --ledger "$OUT/shard2.jsonl" --nproc 2 2>&1 \
    | grep -E "^result|^timing: ref|two processes|^error"
  local a b same=yes
  a=$(ls -d "$OUT"/shard1/*/ | head -1); b=$(ls -d "$OUT"/shard2/*/ | head -1)
  for f in raw/samples.csv raw/reference.json results/tests.json results/tests.csv verdict.json; do
    cmp -s "$a/$f" "$b/$f" && echo "identical: $f" || { echo "DIFFERENT: $f"; same=no; }
  done
  grep -h world_size "$a/environment.json" "$b/environment.json"
  echo "shard invariance: $same"
  rm -rf "$OUT/shard1" "$OUT/shard2" "$OUT"/shard*.jsonl
}
part_perf() {
  # The performance kind's A/B on CUDA (protocols/performance.yaml: nospec base vs async
  # candidate, preset small, 4 processes per side in ABBA order, profiler attribution),
  # then its PR page section and verify's recomputation from the raw measurements.
  # PERF_ARGS adds options, e.g. PERF_ARGS="--base-ref main" on a checkout with history.
  LIMIT_perf=${LIMIT_perf:-570}
  # shellcheck disable=SC2086
  lim python3 -m specconform run protocols/performance.yaml --no-sign --out "$OUT/perf" \
    ${PERF_ARGS:-} 2>&1 | grep -vE "^processes: "
  local zip; zip=$(ls "$OUT"/perf/performance-*.zip 2>/dev/null | head -1)
  [ -n "$zip" ] || { echo "no performance archive"; return; }
  python3 -m specconform verify "$zip" --skip-signature
  python3 -m specconform report --pr "$zip" --out "$OUT/perf-report.md"
  cp "${zip%.zip}"/plots/*.svg "$OUT/" 2>/dev/null
}
part_sequence() {
  # Every committed token on the small preset (issue 12): the grid of 12 sampling
  # configurations, the mechanism tests; --verbose prints the timing: breakdown.
  LIMIT_sequence=${LIMIT_sequence:-570}
  if [ -e "$OUT/.seqtol-exceeded" ]; then
    echo "skipped: seqtol found a comparison beyond sequence.yaml's stated tolerance"; return
  fi
  lim python3 -m specconform run protocols/sequence.yaml --no-sign --out "$OUT/sequence" \
    --verbose
  local zip; zip=$(ls "$OUT"/sequence/sequence-*.zip 2>/dev/null | head -1)
  [ -n "$zip" ] || { echo "no sequence archive"; return; }
  python3 -m specconform verify "$zip" --skip-signature
  python3 -m specconform report --pr "$zip" --out "$OUT/sequence-report.md"
  # The device tool brings back few files: keep the archive and its page, not its folder.
  mv "$zip" "$OUT/" && rm -rf "$OUT/sequence"
}
part_profile() {
  lim python3 bench/round_profile.py --device cuda --preset small --concurrency 1,64,1024 \
    --json "$OUT/profile-small.json" 2>&1 | grep -v "^USDT\|^STAGE"
  lim python3 bench/round_profile.py --device cuda --preset ouro-1.4b --concurrency "${PROFILE_OURO_CONC:-64,1024}" --modes "${PROFILE_MODES:-nospec,async}" \
    --json "$OUT/profile-ouro.json" 2>&1 | grep -v "^USDT\|^STAGE"
}
part_timeline() {
  # Issue 16, part 2: where the graphed steady-state run's wall clock goes on the host
  # (bench/host_timeline.py: per-phase host ms per step, CUDA runtime calls per step).
  lim python3 bench/host_timeline.py --device cuda --preset small \
    --concurrency "${TIMELINE_CONCURRENCY:-1,4,64}" --modes "${TIMELINE_MODES:-nospec,async}"
}
part_coldstart() {
  # Issue 16, part 3: import torch, the first CUDA call and the model build, each in a
  # fresh process (bench/cold_start.py), against the overlapped-build candidate.
  lim python3 bench/cold_start.py --preset small --dtype float32 --runs 2
  lim python3 bench/weight_cache_digest.py --runs 3  # the weight cache's entry check
}
part_seqtol() {
  # Teacher forcing, trace and oracle differences of the correct engine on the GPU preset
  # (tolerances lifted, nothing falls back): run before sequence.yaml's first run.
  LIMIT_seqtol=${LIMIT_seqtol:-240}
  timeout --kill-after=10 "$LIMIT_seqtol" python3 bench/sequence_tolerances.py \
    protocols/sequence.yaml --requests 4 --max-tokens "${SEQTOL_TOKENS:-384}"
  local rc=$?
  # 1: a comparison beyond its stated tolerance; sequence.yaml would only fall back.
  [ $rc -eq 1 ] && touch "$OUT/.seqtol-exceeded"
  [ $rc -eq 0 ] || echo "!!! seqtol rc=$rc"
}
part_seqkill() {
  LIMIT_seqkill=${LIMIT_seqkill:-570}
  lim bash bench/gpu_kill_sequence.sh "$((LIMIT_seqkill - 30))"
}
part_fp32seq() {
  # The anytime-valid mode on the GPU protocol (issue 10): clean engine, then one bug.
  lim python3 -m specconform run protocols/fp32_t2.yaml --sequential --seeds 5000 \
    --offset 2e6 --out "$OUT/seq" --ledger "$OUT/seq-ledger.jsonl" --no-sign --verbose
  lim python3 -m specconform run protocols/fp32_t2.yaml --sequential --seeds 5000 \
    --offset 3e6 --mutant draft_raw_q --out "$OUT/seq" --ledger "$OUT/seq-ledger.jsonl" \
    --no-sign
}
part_engine_small() { engine_preset small; }
# ouro-1.4b at 1,024 requests: 48 GiB of per-depth KV per mode, so one mode at a time.
part_engine_ouro() { engine_preset ouro-1.4b --one-engine-from 1024; }
part_engine() { PART=engine_small part_engine_small; PART=engine_ouro part_engine_ouro; }

for part in ${*:-env tests bench fp32 kill}; do
  PART=$part
  log "$part"
  case $part in
    tests+kill)
      part_tests > "$OUT/.tests.log" 2>&1 &
      tests_pid=$!
      part_kill
      wait $tests_pid; cat "$OUT/.tests.log"; rm -f "$OUT/.tests.log" ;;
    env|tests|bench|sweep|fp32|fp32ab|profile_ouro|fp32prof|profile|timeline|coldstart|shard|kill|kill2|bonus|killci|engine|engine_small|engine_ouro|perf|seqtol|sequence|seqkill|fp32seq) "part_$part" ;;
    *) echo "unknown part: $part"; exit 2 ;;
  esac
done
log done
