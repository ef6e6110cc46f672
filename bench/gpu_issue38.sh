#!/usr/bin/env bash
# Issue 38's open questions in one device call (~6 minutes on an H100), results last:
#   1. protocols/sequence.yaml to a verdict under the stack sampler (where its wall goes,
#      per thread: bench/stack_sample.py), while the CPU beside it runs vLLM's accept
#      kernel point by point under Triton's interpreter (bench/vllm_kernel_points.py;
#      CPU-only, 16 cores: it takes none of the GPU's time);
#   2. the same points on CUDA, and the comparison (docs/peers.md, "GPU, 2026-12-07, late");
#   3. fp32_t2 at --seeds FP32_SEEDS (default 5e4) as one process, then as two processes
#      sharing the device (--fp32-nproc 2), side by side on the same machine, with the GPU
#      memory sampled every 2 s;
#   4. the GPU tests of the reference rows, the KV layout and teacher forcing.
# In that order of priority: a call cut short still brings back the files of $OUT.
# Carry .whl and .peers-gpu/vllm.tar.xz (bench/peers_gpu.sh prepare). PARTS (default
# "sequence tests") adds the optional parts: a short call runs PARTS= FP32_SEEDS=2e4.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
SEEDS=${FP32_SEEDS:-5e4}
PARTS=${PARTS-sequence tests}
want() { [[ " $PARTS " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
bash bench/peers_gpu.sh install vllm > /tmp/install.txt 2>&1 || { tail -20 /tmp/install.txt; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch,triton,sys;print(torch.__version__,triton.__version__,sys.version.split()[0])"
  date -u
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1: sequence.yaml on the GPU, the interpreter's points on the CPU beside it
(TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= timeout 200 python3 bench/vllm_kernel_points.py \
  --device cpu --json /tmp/points-cpu.json > /tmp/vk-cpu.txt 2>&1; echo "cpu rc=$?" >> /tmp/vk-cpu.txt) &
if want sequence; then
  timeout 220 python3 bench/stack_sample.py --top 30 --json "$OUT/stacks.json" -m specconform \
    run protocols/sequence.yaml --no-sign --out /tmp/seq -v > "$OUT/seq.log" 2>&1
  echo "=== sequence rc $? $(date -u +%T)"
fi

# 2: the CUDA points and the comparison
timeout 60 python3 bench/vllm_kernel_points.py --device cuda --json /tmp/points-cuda.json \
  > /tmp/vk-cuda.txt 2>&1; echo "cuda rc=$?" >> /tmp/vk-cuda.txt
wait
python3 bench/vllm_kernel_points.py --compare /tmp/points-cpu.json /tmp/points-cuda.json \
  > /tmp/vk-compare.txt 2>&1; echo "compare rc=$?" >> /tmp/vk-compare.txt
cat /tmp/vk-cpu.txt /tmp/vk-cuda.txt /tmp/vk-compare.txt > "$OUT/vllm-points.txt"
echo "=== vLLM points done $(date -u +%T)"

# 3: fp32_t2, one process then two on the one device
: > "$OUT/gpumem.txt"
nvidia-smi --query-gpu=memory.used --format=csv,noheader -l 2 >> "$OUT/gpumem.txt" 2>&1 &
SMI=$!
for n in 1 2; do
  echo "--- nproc $n $(date -u +%T)" >> "$OUT/gpumem.txt"
  timeout 90 python3 bench/speed_at_bound.py --parts fp32 --fp32-seeds "$SEEDS" --fp32-nproc $n \
    --limit-fp32 85 --keep /tmp/sab-$n > "$OUT/fp32-nproc$n.log" 2>&1
done
kill $SMI 2>/dev/null

# 4: GPU tests
want tests && timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/engine/test_reference_rows.py tests/engine/test_engine_layout.py \
  tests/engine/test_teacher_forcing.py > "$OUT/tests.txt" 2>&1

# results last (only the output's last 12,000 characters come back)
if want sequence; then
  grep "^timing" "$OUT/seq.log" | tail -20
  sed -n '/# stack samples/,$p' "$OUT/seq.log" | grep -v '^\s*$' | head -50
  grep -h "result:\|Error\|error:" "$OUT/seq.log" | tail -3
fi
want tests && tail -3 "$OUT/tests.txt"
grep -h "zero_mass\|IDENTICAL\|DIFFERENT\|rc=" "$OUT/vllm-points.txt" | cut -c1-300
for n in 1 2; do echo "nproc $n: peak GPU MiB $(sed -n "/--- nproc $n/,/--- /p" "$OUT/gpumem.txt" | grep -v -- --- | sort -n | tail -1)"; done
for n in 1 2; do sed -n '/# summary/,$p' "$OUT/fp32-nproc$n.log"; done
date -u
