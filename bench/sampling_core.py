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

Then speculative_accept (K = --draft-k) and categorical at V = --vocab for every B in
--sampling-rows (default 1, 64, 4096), torch path against Triton path
(ENGINE_UNDER_TEST_SAMPLING-style switch `set_sampling_backend`), steady state: warm-up,
then CUDA events around --calls back-to-back calls. Their floors, at the copy bandwidth
measured in the same run (one 1 GiB device-to-device copy, read + write):
  accept       the p row at each row's stop point, plus q's row where it rejects (the
               rows the operation must touch; the coins are 2K gathers of a 32-byte
               sector each), the drafts/lens/uniforms read and the outputs written;
               "all rows" is the looser floor of reading every p and q row once;
  categorical  every weight read once, u read, the tokens written.
Exit status 1 when a Triton result differs from the torch path (tokens, counts, error
flags; categorical tokens), with the differing rows printed. One command on an H200:

    python3 bench/sampling_core.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from graph_latency import graph_ms

from engine_under_test.sampling import batched_probabilities, categorical, speculative_accept
from engine_under_test.sampling._dispatch import sampling_backend, set_sampling_backend


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


def steady_ms(fn, device, calls: int, warmup: int = 3) -> float:
    """Mean milliseconds per call over `calls` back-to-back calls after warm-up (CUDA
    events around the whole loop: launch overheads overlap as they do in a real loop)."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e3 / calls
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def copy_bandwidth(device, calls: int) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write counted)."""
    n = (1 << 30) // 4 if device.type == "cuda" else (1 << 24) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = steady_ms(lambda: dst.copy_(src), device, calls)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def accept_inputs(B: int, K: int, V: int, device, dtype):
    """Realistic laws: q a perturbed p (acceptance ~ 70-80 %), draft_lens K, drafts from q."""
    g = torch.Generator(device=device).manual_seed(B)
    logits = torch.randn(B, K + 1, V, generator=g, device=device) * 3
    p = torch.softmax(logits, -1).to(dtype)
    q = torch.softmax(logits[:, :K] + torch.randn(B, K, V, generator=g, device=device), -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    lens = torch.full((B,), K, dtype=torch.int64, device=device)
    u = torch.rand(B, 2 * K + 1, generator=g, dtype=torch.float64, device=device)
    return p, q.to(dtype), drafts, lens, u


def with_backend(backend: str, fn):
    """fn() with speculative_accept / categorical forced to `backend`."""
    previous = sampling_backend()
    set_sampling_backend(backend)
    try:
        return fn()
    finally:
        set_sampling_backend(previous)


def differing_rows(want, got) -> list[int]:
    want, got = ([want], [got]) if isinstance(want, torch.Tensor) else (want, got)
    bad = torch.zeros(want[0].shape[0], dtype=torch.bool, device=want[0].device)
    for a, b in zip(want, got, strict=True):
        bad |= (a != b).reshape(a.shape[0], -1).any(1)
    return bad.nonzero().flatten().tolist()[:20]


def compare_and_time(label: str, call, device, calls: int, mismatches: list[str]):
    """(the torch path's result, {"torch_ms", "triton_ms"}) for call() (one op on fixed
    inputs); a Triton result differing from the torch path's is added to `mismatches`."""
    want = with_backend("torch", call)
    times = {"torch_ms": with_backend("torch", lambda: steady_ms(call, device, calls))}
    if device.type == "cuda":  # the auto backend is the Triton kernel on CUDA
        bad = differing_rows(want, with_backend("auto", call))
        if bad:
            mismatches.append(f"{label}: rows {bad} differ from the torch path")
        times["triton_ms"] = with_backend("auto", lambda: steady_ms(call, device, calls))
        graphed = with_backend("auto", lambda: graph_ms(call))
        if graphed is not None:  # the engine's view: kernels replayed, no Python launch
            times["triton_graph_ms"] = graphed
    return want, times


def sampling_section(args, device, bandwidth: float) -> tuple[list[dict], list[str]]:
    """Rows of the accept / categorical table, and the mismatches found."""
    dtype = getattr(torch, args.sampling_dtype)
    elem = torch.empty(0, dtype=dtype).element_size()
    K, V = args.draft_k, args.vocab
    rows, mismatches = [], []
    for B in args.sampling_rows:
        calls = max(20, min(500, int(2e5 // B)))
        acc = accept_inputs(B, K, V, device, dtype)
        want, times = compare_and_time(
            f"speculative_accept B={B}",
            lambda: speculative_accept(*acc),  # noqa: B023
            device,
            calls,
            mismatches,
        )
        lens = acc[3]
        rejected = int(((want.num_accepted < lens) & ~want.error).sum())
        # drafts + lens + uniforms read, tokens + counts + flags written, 2K gathered sectors
        io = B * (K + 1 + 2 * K + 1) * 8 + B * ((K + 1) * 8 + 8 + 8 + 1) + B * 2 * K * 32
        touched = (B + rejected) * V * elem + io
        all_rows = B * (2 * K + 1) * V * elem + io
        rows.append(
            {
                "op": "speculative_accept",
                "B": B,
                "K": K,
                "V": V,
                "dtype": args.sampling_dtype,
                "rejected_rows": rejected,
                "floor_ms": touched / bandwidth * 1e3,
                "floor_all_rows_ms": all_rows / bandwidth * 1e3,
                **times,
            }
        )
        probs, uc = acc[0][:, 0].contiguous(), acc[4][:, 0].contiguous()
        acc = None  # free p and q before the categorical inputs are used
        _, times = compare_and_time(
            f"categorical B={B}",
            lambda: categorical(probs, uc),  # noqa: B023
            device,
            calls,
            mismatches,
        )
        floor = (B * V * elem + B * 16) / bandwidth * 1e3
        rows.append(
            {
                "op": "categorical",
                "B": B,
                "K": 0,
                "V": V,
                "dtype": args.sampling_dtype,
                "rejected_rows": 0,
                "floor_ms": floor,
                "floor_all_rows_ms": floor,
                "multinomial_ms": steady_ms(
                    lambda: torch.multinomial(probs, 1),  # noqa: B023
                    device,
                    calls,
                ),
                **times,
            }
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for entry in rows:
        entry["torch_ratio"] = entry["torch_ms"] / entry["floor_ms"]
        if "triton_ms" in entry:
            entry["triton_ratio"] = entry["triton_ms"] / entry["floor_ms"]
            entry["triton_over_torch"] = entry["triton_ms"] / entry["torch_ms"]
    return rows, mismatches


def print_table(rows: list[dict], bandwidth: float) -> None:
    print(f"\ncopy bandwidth (read + write): {bandwidth / 1e9:.0f} GB/s")
    head = (
        "op",
        "B",
        "floor ms",
        "all-rows ms",
        "torch ms",
        "triton ms",
        "torch/floor",
        "triton/floor",
        "triton/torch",
        "multinomial ms",
    )
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        cells = (
            r["op"],
            str(r["B"]),
            f"{r['floor_ms']:.4f}",
            f"{r['floor_all_rows_ms']:.4f}",
            f"{r['torch_ms']:.4f}",
            f"{r.get('triton_ms', float('nan')):.4f}",
            f"{r['torch_ratio']:.2f}",
            f"{r.get('triton_ratio', float('nan')):.2f}",
            f"{r.get('triton_over_torch', float('nan')):.2f}",
            f"{r['multinomial_ms']:.4f}" if "multinomial_ms" in r else "",
        )
        print(" | ".join(cells))


def sweep_section(args, device) -> list[dict]:
    """The Triton accept kernel at the largest B under each --sweep launch configuration."""
    from engine_under_test.sampling import triton_categorical

    B = max(args.sampling_rows)
    acc = accept_inputs(B, args.draft_k, args.vocab, device, getattr(torch, args.sampling_dtype))
    saved = dict(triton_categorical.SAMPLING_CONFIG)
    saved_large = triton_categorical.LARGE_BATCH
    triton_categorical.LARGE_BATCH = 1 << 62  # every B under SAMPLING_CONFIG while sweeping
    out = []
    try:
        for text in args.sweep:
            triton_categorical.SAMPLING_CONFIG.update(
                {k: int(v) for k, v in (item.split("=") for item in text.split(",") if item)}
            )
            ms = with_backend(
                "auto", lambda: steady_ms(lambda: speculative_accept(*acc), device, 20)
            )
            out.append({"config": dict(triton_categorical.SAMPLING_CONFIG), "accept_ms": ms})
            print(f"sweep {text or 'default'}: accept {ms:.4f} ms")
            triton_categorical.SAMPLING_CONFIG.clear()
            triton_categorical.SAMPLING_CONFIG.update(saved)
    finally:
        triton_categorical.SAMPLING_CONFIG.clear()
        triton_categorical.SAMPLING_CONFIG.update(saved)
        triton_categorical.LARGE_BATCH = saved_large
    return out


def main(argv=None) -> int:
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
    ap.add_argument(
        "--kernel-config", default="", help="KEY=VALUE,... overrides of triton_kernels.PROBS_CONFIG"
    )
    ap.add_argument(
        "--sampling-rows",
        type=lambda t: [int(x) for x in t.split(",")],
        default=None,
        help="B values for accept/categorical (default 1,64,4096 on CUDA, 1,16 on CPU; 0: skip)",
    )
    ap.add_argument("--draft-k", type=int, default=3)
    ap.add_argument("--sampling-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument(
        "--sweep",
        nargs="*",
        default=None,
        help="KEY=VALUE,... triton_categorical.SAMPLING_CONFIG overrides to time "
        "the accept kernel under at the largest B ('' = default)",
    )
    ap.add_argument(
        "--split-below",
        type=int,
        default=None,
        help="triton_categorical.SPLIT_CONFIG['BELOW'] (0: one program per row)",
    )
    ap.add_argument("--json", default="", help="also write the results to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.sampling_rows is None:
        args.sampling_rows = [1, 64, 4096] if device.type == "cuda" else [1, 16]
    args.sampling_rows = [b for b in args.sampling_rows if b > 0]
    if args.split_below is not None:
        from engine_under_test.sampling import triton_categorical

        triton_categorical.SPLIT_CONFIG["BELOW"] = args.split_below
    result = probabilities_section(args, device)
    bandwidth = copy_bandwidth(device, 20)
    rows, mismatches = sampling_section(args, device, bandwidth) if args.sampling_rows else ([], [])
    if rows:
        print_table(rows, bandwidth)
    sweep = (
        sweep_section(args, device)
        if (args.sweep is not None and device.type == "cuda" and args.sampling_rows)
        else []
    )
    result.update(
        {
            "copy_bandwidth_GBps": bandwidth / 1e9,
            "sampling": rows,
            "sweep": sweep,
            "mismatches": mismatches,
        }
    )
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    for line in mismatches:
        print(f"error: {line}", file=sys.stderr)
    return 1 if mismatches else 0


def probabilities_section(args, device) -> dict:
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
    probs_t = timed(
        lambda: batched_probabilities(logits, temperature, top_k, top_p), device, args.repeats
    )
    hints = {"max_top_k": args.top_k if args.top_k > 0 else None, "any_top_p": args.top_p < 1.0}
    hinted_t = timed(
        lambda: batched_probabilities(logits, temperature, top_k, top_p, **hints),
        device,
        args.repeats,
    )
    probs = batched_probabilities(logits, temperature, top_k, top_p)
    check = {}
    if args.check:
        cpu = batched_probabilities(
            logits.cpu(), temperature.cpu(), top_k.cpu(), top_p.cpu(), **hints
        )
        got = probs.cpu()
        check = {
            "support_equal_cpu": bool(torch.equal(got > 0, cpu > 0)),
            "max_abs_diff_cpu": float((got - cpu).abs().max()),
            "hinted_equal": bool(
                torch.equal(
                    batched_probabilities(logits, temperature, top_k, top_p, **hints), probs
                )
            ),
        }
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
        "torch": torch.__version__,
        "rows": B,
        "vocab": V,
        "dtype": args.dtype,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "floor_ms": floor * 1e3,
        "batched_probabilities_ms": probs_t * 1e3,
        "ratio_to_floor": probs_t / floor,
        "batched_probabilities_hinted_ms": hinted_t * 1e3,
        "hinted_ratio_to_floor": hinted_t / floor,
        "categorical_ms": cat_t * 1e3,
        "speculative_accept_K3_ms": acc_t * 1e3,
        **check,
    }
    if device.type == "cuda":
        from engine_under_test.sampling import triton_kernels

        result["kernel_config"] = dict(triton_kernels.PROBS_CONFIG)
    for k, v in result.items():
        print(f"{k:>32}: {v:.4g}" if isinstance(v, float) else f"{k:>32}: {v}")
    return result


if __name__ == "__main__":
    sys.exit(main())
