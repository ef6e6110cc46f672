"""Where one fp32_t2 group batch spends its device time (issue 38, part 2).

fp32_t2 runs each group as batches of ``--batch`` requests of max_tokens 3 on the
default prompt (T 1, top-k 20, K 3). This bench builds the protocol's engine for each
``--modes`` entry, runs one batch to warm it (CUDA Graph capture, caches), times
``--repeats`` batches (wall, synchronized), then profiles one more under torch.profiler
and prints the kernels by total device time with their share, so the part of a batch
that is matmul, law (softmax / top-k / sort), accept or host gaps is a number.

    python3 bench/fp32_batch_profile.py --device cuda --batch 5000 --modes nospec,async
    python3 bench/fp32_batch_profile.py --device cpu --preset tiny --batch 8 --top 5

``--continuous N`` (no profile) instead times, side by side in one engine, N batches run
as N ``generate`` calls (the runner's batch loop: the device idles while the host admits,
commits and returns each batch) against one ``generate`` call of the same N x batch
requests at ``max_num_seqs`` = batch (continuous batching: a finished request's slot is
refilled while the next round runs), and prints microseconds per request of each.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import torch

import engine_under_test as eut
from engine_under_test import DEFAULT_PROMPT, SamplingParams, SpeculativeConfig

MODES = {  # the protocol's groups: (speculative?, async?, draft loops)
    "nospec": (False, False, 0),
    "sync": (True, False, 2),
    "async": (True, True, 2),
    "sync_d1": (True, False, 1),
    "async_d1": (True, True, 1),
}


def build(args, mode: str) -> eut.LLM:
    spec, is_async, d = MODES[mode]
    return eut.LLM(
        args.preset,
        speculative_config=(
            SpeculativeConfig(num_speculative_tokens=3, mode="block", draft_loops=d)
            if spec
            else None
        ),
        async_scheduling=is_async,
        device=args.device,
        dtype=torch.float32,
        max_num_seqs=args.batch,
    )


def one_batch(llm: eut.LLM, batch: int, first_seed: int) -> int:
    params = [
        SamplingParams(temperature=1.0, top_k=20, seed=first_seed + i, max_tokens=3)
        for i in range(batch)
    ]
    outs = llm.generate([list(DEFAULT_PROMPT)] * batch, params)
    return sum(len(o.token_ids) for o in outs)


def continuous(args, mode: str, n: int) -> dict:
    """us per request: n batches as n generate calls, then as one call (best of 2 each,
    alternated so that drift hits both)."""
    llm = build(args, mode)
    one_batch(llm, args.batch, 0)  # warm
    seed, split, joined = args.batch, [], []
    for _ in range(2):
        sync(args.device)
        t0 = time.perf_counter()
        for _ in range(n):
            one_batch(llm, args.batch, seed)
            seed += args.batch
        sync(args.device)
        split.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        one_batch(llm, n * args.batch, seed)
        seed += n * args.batch
        sync(args.device)
        joined.append(time.perf_counter() - t0)
    llm.close()
    per = 1e6 / (n * args.batch)
    out = {"split_us": min(split) * per, "joined_us": min(joined) * per}
    print(
        f"{mode}: {n} x {args.batch} requests: {out['split_us']:.1f} us/request as {n} "
        f"generate calls, {out['joined_us']:.1f} as one (ratio {out['split_us'] / out['joined_us']:.2f})"
    )
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def kernel_table(prof, top: int, device: str) -> list[dict]:
    """Kernels (device-side events) by total device time, with their share of the sum;
    on CPU, operators by self CPU time (there the operators are the kernels)."""
    rows = []
    for ev in prof.key_averages():
        if device == "cuda":  # the kernels themselves, not the operators that launch them
            if ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = float(ev.self_device_time_total)
        else:
            us = float(ev.self_cpu_time_total)
        if us > 0:
            rows.append({"name": ev.key[:90], "calls": int(ev.count), "device_ms": us / 1e3})
    total = sum(r["device_ms"] for r in rows) or 1.0
    rows.sort(key=lambda r: -r["device_ms"])
    for r in rows:
        r["share"] = r["device_ms"] / total
    return rows[:top] + [{"name": "(all kernels)", "calls": 0, "device_ms": total, "share": 1.0}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--modes", default="nospec,async")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--continuous", type=int, default=0, help="N: split vs joined batches")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"--modes: unknown {unknown}; choose from {sorted(MODES)}")
    report = {"device": args.device, "preset": args.preset, "batch": args.batch, "modes": {}}
    if args.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    if args.continuous:
        for mode in modes:
            report["modes"][mode] = continuous(args, mode, args.continuous)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return
    seed = 0
    for mode in modes:
        llm = build(args, mode)
        one_batch(llm, args.batch, seed)  # warm: graph capture, caches
        seed += args.batch
        sync(args.device)
        walls = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tokens = one_batch(llm, args.batch, seed)
            sync(args.device)
            walls.append(time.perf_counter() - t0)
            seed += args.batch
        activities = [torch.profiler.ProfilerActivity.CPU]
        if args.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            one_batch(llm, args.batch, seed)
            sync(args.device)
        seed += args.batch
        table = kernel_table(prof, args.top, args.device)
        report["modes"][mode] = {"wall_s": walls, "tokens": tokens, "kernels": table}
        print(f"\n== {mode}: batch {args.batch}, wall {', '.join(f'{w:.3f}' for w in walls)} s")
        for r in table:
            print(f"{r['device_ms']:10.2f} ms {r['share']:6.1%} {r['calls']:6d}  {r['name']}")
        llm.close()
        del llm
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
