#!/usr/bin/env bash
# One batched GPU session (the lab's device tool runs this from the repository root with
# $OUT as the folder that comes back). Records versions, runs the GPU tests, the sampling
# and engine benchmarks, fp32_t2 at 5,000 seeds, and the fp32_t2 kill matrix.
# Usage: bash bench/gpu_session.sh [part...]   parts: env tests bench fp32 kill engine
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CI=true
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
else
  export PYTHONPATH=$PWD
fi
parts=${*:-env tests bench fp32 kill}
log() { echo "=== $* ($(date -u +%H:%M:%S))"; }
for part in $parts; do
  case $part in
    env)
      log env
      nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
      python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'gpu', torch.cuda.get_device_name(0))" ;;
    tests)
      log gpu tests
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -25 ;;
    bench)
      log sampling core
      python3 bench/sampling_core.py --device cuda --rows 1024 --vocab 49152 | tail -1
      python3 bench/sampling_core.py --device cuda --rows 64 --vocab 49152 | tail -1 ;;
    fp32)
      log fp32_t2
      /usr/bin/time -v python3 -m specconform run protocols/fp32_t2.yaml --seeds 5000 \
        --offset 2e6 --out "$OUT/runs" --no-sign 2>"$OUT/fp32_time.txt" | tail -40
      grep -E "Elapsed|Maximum resident" "$OUT/fp32_time.txt"
      mv "$OUT"/runs/*.zip "$OUT/" 2>/dev/null; rm -rf "$OUT/runs" ;;
    kill)
      log kill matrix fp32_t2
      python3 bench/kill_matrix.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 \
        --device cuda --out "$OUT/kill-fp32_t2.md" 2>/dev/null | tail -20 ;;
    killci)
      log kill matrix ci_gate on cuda
      python3 bench/kill_matrix.py protocols/ci_gate.yaml --device cuda \
        --out "$OUT/kill-ci_gate.md" 2>/dev/null | tail -20 ;;
    engine)
      log engine throughput
      python3 bench/engine_throughput.py --device cuda --preset small 2>&1 | tail -40
      python3 bench/engine_throughput.py --device cuda --preset ouro-1.4b 2>&1 | tail -40 ;;
  esac
done
log done
