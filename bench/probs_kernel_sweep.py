"""Benchmark: launch configurations of the fused probabilities kernel, side by side.

For every configuration (KEY=VALUE,... overrides of triton_kernels.PROBS_CONFIG, one per
argument) and every case (rows x sampling parameters), prints the kernel's median time,
its ratio to the bandwidth floor measured in the same run (one copy that reads the
logits and writes float32 probabilities), and a correctness check against the torch
path (same support, max |diff|). Nothing is asserted; CUDA only.

    python bench/probs_kernel_sweep.py "" "PREFETCH=1" "BLOCK=4096,num_warps=4"
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from sampling_core import timed  # bench/ is the script's directory

from engine_under_test.sampling import batched_probabilities, set_triton_enabled

# (name, rows, temperature, top_k, top_p): the engine's case (T=1, top-k 20) first.
CASES = [
    ("k20", 1024, 1.0, 20, 1.0),
    ("k20_rows64", 64, 1.0, 20, 1.0),
    ("k20_p0.9", 1024, 1.0, 20, 0.9),
    ("k50_t0.7", 1024, 0.7, 50, 1.0),
    ("plain_t1", 1024, 1.0, 0, 1.0),
    ("greedy", 1024, 0.0, 0, 1.0),
]


def parse_config(text: str, known: dict) -> dict:
    """'BLOCK=4096,num_warps=4' -> {'BLOCK': 4096, 'num_warps': 4} ('' -> {})."""
    config = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in known:
            raise SystemExit(f"error: unknown kernel config key {key!r}")
        config[key] = int(value)
    return config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=[""])
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", default=None, help="write the result rows to this file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: the sweep needs CUDA", file=sys.stderr)
        return 2
    from engine_under_test.sampling import triton_kernels  # needs CUDA's triton

    device = torch.device("cuda")
    base = dict(triton_kernels.PROBS_CONFIG)
    gen = torch.Generator().manual_seed(0)
    V = args.vocab
    logits = (torch.randn(max(c[1] for c in CASES), V, generator=gen) * 3).to(
        device=device, dtype=torch.bfloat16
    )
    inputs, floors, wants = {}, {}, {}
    for name, B, t, k, p in CASES:
        x = logits[:B]
        params = (
            torch.full((B,), t, device=device),
            torch.full((B,), k, dtype=torch.int64, device=device),
            torch.full((B,), p, device=device),
        )
        inputs[name] = (x, *params)
        out = torch.empty(B, V, dtype=torch.float32, device=device)
        floors[name] = timed(lambda out=out, x=x: out.copy_(x), device, args.repeats)
        set_triton_enabled(False)
        wants[name] = batched_probabilities(*inputs[name])
        set_triton_enabled(True)
    rows = []
    for text in args.configs:
        triton_kernels.PROBS_CONFIG.clear()
        triton_kernels.PROBS_CONFIG.update(base, **parse_config(text, base))
        for name, *_ in CASES:
            fn = lambda case=inputs[name]: batched_probabilities(*case)  # noqa: E731
            got = fn()
            row = {
                "config": text or "default",
                "case": name,
                "ms": timed(fn, device, args.repeats) * 1e3,
                "floor_ms": floors[name] * 1e3,
                "support_equal": bool(torch.equal(got > 0, wants[name] > 0)),
                "max_abs_diff": float((got - wants[name]).abs().max()),
            }
            row["ratio"] = row["ms"] / row["floor_ms"]
            rows.append(row)
            print(
                f"{row['config']:>36} {name:>11}: {row['ms']:7.3f} ms  "
                f"{row['ratio']:5.2f}x floor  support_equal={row['support_equal']} "
                f"max_diff={row['max_abs_diff']:.2g}",
                flush=True,
            )
    print(f"# {torch.cuda.get_device_name(device)} torch {torch.__version__} V={V} bf16")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
