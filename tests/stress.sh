#!/usr/bin/env bash
# `make test-stress`: clone this checkout's HEAD afresh, load every core with one busy
# process, and run `make test` RUNS times in a row in the clone. Exits non-zero on the
# first failing run. Each run's summary line and wall time go to DIR/summary.txt.
set -euo pipefail
runs="${1:-3}"
dir="${2:-/tmp/specconform-stress}"
src="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$dir"
mkdir -p "$dir"
git clone -q "$src" "$dir/clone"
cd "$dir/clone"
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, load: $(nproc) busy processes" \
  | tee "$dir/summary.txt"
busy=()
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
make install >"$dir/install.log" 2>&1
for i in $(seq "$runs"); do
  start=$(date +%s)
  status=0
  make test >"$dir/run-$i.log" 2>&1 || status=$?
  end=$(date +%s)
  line="$(grep -E '(passed|failed)' "$dir/run-$i.log" | tail -1)"
  echo "run $i: exit $status in $((end - start)) s: $line" | tee -a "$dir/summary.txt"
  if [ "$status" != 0 ]; then
    exit "$status"
  fi
done
