"""Where a speculative round's time goes: device time, CPU time and kernel launches per
phase of one steady-state engine step, for nospec and block speculation side by side.

Each (preset, mode, concurrency) profiles ``--steps`` engine steps after
``--warmup-steps`` (torch.profiler, eager: a CUDA Graph replay hides the phase ranges;
the graph-replayed step is faster, so read the launch counts as what graphs save and
the device times as what they do not). The window is the performance kind's own
(specconform/runner/performance_worker.py ``profile``), so the phases are the engine's
ranges (engine_under_test/profiling.py): ``draft`` (the d draft loops and exit heads),
``draft.sample`` (draft laws and tokens), ``verify`` (loops d..R-1 over K + 1
positions), ``verify.probabilities`` (the target laws), ``accept``, ``collect`` (the
host's commit of a round's results) and ``other`` (scheduling, inputs, nospec's step).
Per step: device ms, CPU ms (self time of the operators), kernels and operator calls.

    python3 bench/round_profile.py --device cuda --preset small --concurrency 64,1024
    python3 bench/round_profile.py --device cpu --preset tiny --concurrency 4 --steps 4
"""

from __future__ import annotations

import gc
import json
from collections import defaultdict
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import torch

import engine_under_test as eut
from bench.engine_args import engine_parser
from engine_under_test import DEFAULT_PROMPT
from specconform.runner import performance_worker as worker

ORDER = ("draft", "draft.sample", "verify", "verify.probabilities", "accept", "collect", "other")


def phase_totals(profile: dict) -> dict[str, dict[str, float]]:
    """Per phase (sub-phases kept apart): device and CPU microseconds, kernels, ops."""
    out: dict[str, dict[str, float]] = defaultdict(
        lambda: {"device_us": 0.0, "cpu_us": 0.0, "kernels": 0, "ops": 0}
    )
    for op in profile["ops"]:
        entry = out[op["phase"]]
        entry["device_us"] += float(op["self_device_us"])
        entry["cpu_us"] += float(op["self_cpu_us"])
        entry["kernels"] += int(op["kernels"])
        entry["ops"] += int(op["count"])
    return dict(out)


def profile_one(args, mode: str, concurrency: int) -> dict:
    vocab = eut.ModelConfig.preset(args.preset).vocab_size
    prompts = [
        list(DEFAULT_PROMPT)[: 6 + i % 7] + [(17 * i + 3) % vocab] for i in range(concurrency)
    ]
    request = {
        "engine": {
            "preset": args.preset,
            "model_seed": 0,
            "device": args.device,
            "dtype": args.dtype,
            "num_speculative_tokens": args.k,
            "cuda_graphs": False,
        },
        "config": {"mode": mode, "draft_loops": args.draft_loops},
        "prompts": prompts,
        "profile": {
            "concurrency": concurrency,
            "sampling": args.sampling,
            "warmup_steps": args.warmup_steps,
            "steps": args.steps,
            "top": 0,
        },
    }
    try:
        return worker.profile(eut, torch, request)
    finally:
        # The closed engine's KV cache (48 GiB for ouro-1.4b at c = 1,024) sits in a
        # reference cycle and the allocator's pool: free both before the next row.
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = engine_parser(__doc__.splitlines()[0], concurrency="64,1024")
    ap.add_argument("--sampling", default="random", choices=["greedy", "random"])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--draft-loops", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--json", default=None, help="also write the per-phase totals here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0:
        ap.error("--steps must be at least 1 and --warmup-steps at least 0")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    results = []
    print(
        f"# preset={args.preset} device={args.device} dtype={args.dtype} K={args.k} "
        f"d={args.draft_loops} sampling={args.sampling} eager, {args.steps} steps per row; "
        "per step: device ms / CPU ms / kernels / operator calls"
    )
    for c in [int(x) for x in args.concurrency.split(",")]:
        for mode in args.modes.split(","):
            totals = phase_totals(profile_one(args, mode, c))
            steps = args.steps
            cells = []
            for phase in [*ORDER, *sorted(set(totals) - set(ORDER))]:
                if phase not in totals:
                    continue
                t = totals[phase]
                cells.append(
                    f"{phase} {t['device_us'] / 1e3 / steps:.2f}/{t['cpu_us'] / 1e3 / steps:.2f}"
                    f"/{t['kernels'] / steps:.0f}/{t['ops'] / steps:.0f}"
                )
            device_ms = sum(t["device_us"] for t in totals.values()) / 1e3 / steps
            kernels = sum(t["kernels"] for t in totals.values()) / steps
            print(
                f"c={c:>5} {mode:>6}: total {device_ms:.2f} ms, {kernels:.0f} kernels | "
                + " | ".join(cells),
                flush=True,
            )
            results.append({"concurrency": c, "mode": mode, "steps": steps, "phases": totals})
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
