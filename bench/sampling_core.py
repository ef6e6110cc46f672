"""Benchmark: batched_probabilities against the memory-bandwidth floor.

The floor is the time to read the logits once and write the float32 probabilities once
at the bandwidth measured in this run (a device-to-device copy of the same bytes). The
sampling core's target: batched_probabilities within 3x of that floor. Also times
speculative_accept and categorical for the same shape. Ratios are measured side by side
in one process; nothing here is asserted.

    python bench/sampling_core.py --device cuda --rows 1024 --vocab 49152
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from engine_under_test.sampling import batched_probabilities, categorical, speculative_accept


def timed(fn, device, repeats: int) -> float:
    """Median seconds per call after warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    B, V = args.rows, args.vocab
    logits = (torch.randn(B, V, generator=gen) * 3).to(device=device, dtype=dtype)
    temperature = torch.full((B,), 1.0, device=device)
    top_k = torch.full((B,), args.top_k, dtype=torch.int64, device=device)
    top_p = torch.full((B,), args.top_p, device=device)

    # Bandwidth floor: read logits, write float32 probabilities, as one copy each.
    out = torch.empty(B, V, dtype=torch.float32, device=device)
    floor = timed(lambda: out.copy_(logits), device, args.repeats)
    probs_t = timed(lambda: batched_probabilities(logits, temperature, top_k, top_p),
                    device, args.repeats)
    probs = batched_probabilities(logits, temperature, top_k, top_p)
    u = torch.rand(B, generator=gen, dtype=torch.float64).to(device)
    cat_t = timed(lambda: categorical(probs, u), device, args.repeats)
    K = 3
    p = probs[:, None].expand(B, K + 1, V).contiguous()
    q = probs[:, None].expand(B, K, V).contiguous()
    drafts = torch.zeros(B, K, dtype=torch.int64, device=device)
    lens = torch.full((B,), K, dtype=torch.int64, device=device)
    uni = torch.rand(B, 2 * K + 1, generator=gen, dtype=torch.float64).to(device)
    acc_t = timed(lambda: speculative_accept(p, q, drafts, lens, uni), device, args.repeats)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "rows": B, "vocab": V, "dtype": args.dtype,
        "top_k": args.top_k, "top_p": args.top_p,
        "floor_ms": floor * 1e3, "batched_probabilities_ms": probs_t * 1e3,
        "ratio_to_floor": probs_t / floor, "categorical_ms": cat_t * 1e3,
        "speculative_accept_K3_ms": acc_t * 1e3,
    }
    for k, v in result.items():
        print(f"{k:>28}: {v:.4g}" if isinstance(v, float) else f"{k:>28}: {v}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
