"""Benchmark: batched_probabilities against the memory-bandwidth floor.

The floor is the time to read the logits once and write the float32 probabilities once
at the bandwidth measured in this run (a device-to-device copy of the same bytes). The
sampling core's target: batched_probabilities within 3x of that floor. Also times
speculative_accept and categorical for the same shape. Ratios are measured side by side
in one process; nothing here is asserted.

batched_probabilities is timed twice: as the runners call it today (no hints) and with
the host hints the engine can give (max_top_k=--top-k, any_top_p=--top-p < 1). On CUDA
both take the fused Triton kernel, which needs no hint; on CPU the hints replace the
full-row sorts with torch.topk. --check compares the timed result with the CPU path
(same support, max |diff|), --kernel-config overrides triton_kernels.PROBS_CONFIG.

    python bench/sampling_core.py --device cuda --rows 1024 --vocab 49152
    python bench/sampling_core.py --device cuda --kernel-config BLOCK=8192,num_warps=16
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
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--check", action="store_true", help="compare with the CPU path")
    ap.add_argument("--kernel-config", default="",
                    help="KEY=VALUE,... overrides of triton_kernels.PROBS_CONFIG")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.kernel_config:
        from engine_under_test.sampling import triton_kernels
        for item in args.kernel_config.split(","):
            key, value = item.split("=")
            triton_kernels.PROBS_CONFIG[key] = int(value)
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
    hints = {"max_top_k": args.top_k if args.top_k > 0 else None,
             "any_top_p": args.top_p < 1.0}
    hinted_t = timed(lambda: batched_probabilities(logits, temperature, top_k, top_p, **hints),
                     device, args.repeats)
    probs = batched_probabilities(logits, temperature, top_k, top_p)
    check = {}
    if args.check:
        cpu = batched_probabilities(logits.cpu(), temperature.cpu(), top_k.cpu(), top_p.cpu(),
                                    **hints)
        got = probs.cpu()
        check = {"support_equal_cpu": bool(torch.equal(got > 0, cpu > 0)),
                 "max_abs_diff_cpu": float((got - cpu).abs().max()),
                 "hinted_equal": bool(torch.equal(
                     batched_probabilities(logits, temperature, top_k, top_p, **hints), probs))}
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
        "ratio_to_floor": probs_t / floor,
        "batched_probabilities_hinted_ms": hinted_t * 1e3,
        "hinted_ratio_to_floor": hinted_t / floor, "categorical_ms": cat_t * 1e3,
        "speculative_accept_K3_ms": acc_t * 1e3, **check,
    }
    if device.type == "cuda":
        from engine_under_test.sampling import triton_kernels
        result["kernel_config"] = dict(triton_kernels.PROBS_CONFIG)
    for k, v in result.items():
        print(f"{k:>32}: {v:.4g}" if isinstance(v, float) else f"{k:>32}: {v}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
