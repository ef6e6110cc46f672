"""Benchmark: committed tokens/s and peak memory, nospec vs sync vs async speculation.

For each concurrency (default 1, 4, 64, 1024) and each sampling kind (greedy: T=0;
random: T=1, top_k=20, per-request seeds), the three modes generate ``--max-tokens``
tokens (ignore_eos) for ``concurrency`` requests. Modes run in ABBA order -- nospec,
sync, async, async, sync, nospec, nospec, ... (``--runs`` per mode, default 3) -- so
drift (clocks, caches, thermal) hits every mode alike; each mode's number is the median
of its runs, so one disturbed run (a garbage collection, a clock dip: an H200 run saw
one run of six take 40% longer) does not move it. Printed side by side: tokens/s,
the ratio to nospec, the draft acceptance ratio (accepted / drafted) and peak memory
(CUDA: max allocated; CPU: the process's peak RSS so far). Nothing is asserted.

The cost of random sampling is measured per round, not per token: greedy and random
rows accept different numbers of drafts, so they need different numbers of rounds for
the same tokens. For each concurrency and mode the script prints the time per round
(one decode step for nospec, one draft+verify round for sync/async) of random rows
over greedy rows; the issue's target is at most 1.02 on ``ouro-1.4b``.

Every mode captures CUDA Graphs on GPU (``--no-graphs`` turns them off for all three).

By default a run is steady state: ``--waves 4`` submits 4 x concurrency requests with
at most ``concurrency`` in flight, refilled as requests finish, so the tail of a batch
whose requests finish after different numbers of rounds is a 1/4 share of the run.
``--waves 1`` is one batch of ``concurrency`` requests that start together (the run
lasts as long as its slowest request).

Beside each measured ratio the script prints what the ratio can be at best
(bench/throughput_bounds.py, with the arithmetic): the compute bound (FLOP-bound
batches) and the bandwidth bound (weight reads), from the run's own committed tokens
and drafts per request-round, and the measured ratio as a share of the compute bound;
the JSON rows also hold the pass bound (every loop pass costing the same in both modes:
the launch-bound regime of small batches), printed in a line under each row that
takes the measured async/nospec apart: committed tokens per slot-round (and their
share of τ, the occupancy) over a round's time per nospec step.

    python bench/engine_throughput.py --preset small --device cuda
    python bench/engine_throughput.py --quick            # CPU smoke: tiny, few tokens
    python bench/engine_throughput.py --json out.json    # also write the rows
    python bench/engine_throughput.py --preset small --device cuda --waves 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import sys
import time

import torch

from engine_under_test import (
    DEFAULT_PROMPT,
    LLM,
    ModelConfig,
    SamplingParams,
    SpeculativeConfig,
)
from engine_under_test.model import build_model

try:  # run as a script (bench/ on sys.path) or imported as bench.engine_throughput
    import throughput_bounds as tb
except ImportError:  # pragma: no cover
    from bench import throughput_bounds as tb

MODES = ("nospec", "sync", "async")


def capture_at_first_use(llm) -> None:
    """The engine runs a round or prefill shape eagerly for its first uses (a capture
    costs more than a shape used once or twice saves); a benchmark wants every shape
    captured in its untimed warm-up instead, so that no capture falls inside a timed run
    (the timed runs repeat the warm-up's requests and seeds, hence its shapes)."""
    llm.runner.capture_at_first_use()


def abba(runs: int) -> list[str]:
    """Mode order for `runs` runs per mode: nospec sync async async sync nospec ..."""
    return [m for i in range(runs) for m in (MODES if i % 2 == 0 else MODES[::-1])]


def sampling(kind: str, n: int, max_tokens: int) -> list[SamplingParams]:
    if kind == "greedy":
        return [SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)] * n
    return [
        SamplingParams(
            temperature=1.0, top_k=20, seed=1000 + i, max_tokens=max_tokens, ignore_eos=True
        )
        for i in range(n)
    ]


def prompts(n: int, vocab: int) -> list[list[int]]:
    base = list(DEFAULT_PROMPT)
    return [base[: 6 + i % 7] + [(17 * i + 3) % vocab] for i in range(n)]


def peak_memory(device: torch.device) -> float:
    """GiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def run_once(llm: LLM, ps, params, device) -> dict:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    rounds0, prefills0 = llm.runner.rounds_run, llm.runner.prefills_run
    early0 = getattr(llm.runner, "slots_released_early", 0)  # async only
    t0 = time.perf_counter()
    outs = llm.generate(ps, params)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    drafted = sum(o.num_drafted for o in outs)
    accepted = sum(o.num_accepted for o in outs)
    rounds = llm.runner.rounds_run - rounds0
    return {
        "seconds": dt,
        "tokens": tokens,
        "requests": len(outs),
        "drafted": drafted,
        "accepted": accepted,
        "tok_s": tokens / dt,
        "rounds": rounds,
        # Prefill batches (eager forwards): async refills a few slots at a time as its
        # requests finish after different numbers of rounds, nospec's finish together.
        "prefills": llm.runner.prefills_run - prefills0,
        # Async: slots refilled a round early (the finished request's last round was
        # still in flight; AsyncBlockRunner.release_spent_slots).
        "released_early": getattr(llm.runner, "slots_released_early", 0) - early0,
        "ms_per_round": 1e3 * dt / max(rounds, 1),
        "acceptance": accepted / drafted if drafted else None,
        "peak_gib": peak_memory(device),
    }


def _write_json(args, device, dtype, rows: list[dict]) -> None:
    if not args.json:
        return
    with open(args.json, "w") as f:
        json.dump(
            {
                "preset": args.preset,
                "device": str(device),
                "dtype": str(dtype),
                "K": args.k,
                "draft_loops": args.draft_loops,
                "max_tokens": args.max_tokens,
                "runs": args.runs,
                "waves": args.waves,
                "rows": rows,
            },
            f,
            indent=2,
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--dtype", default=None, help="float32 | bfloat16 (default: bf16 on CUDA, fp32 on CPU)"
    )
    ap.add_argument("--concurrency", default="1,4,64,1024")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens K")
    ap.add_argument("--draft-loops", type=int, default=2)
    ap.add_argument("--kinds", default="greedy,random")
    ap.add_argument("--no-graphs", action="store_true", help="every mode without CUDA Graphs")
    ap.add_argument(
        "--one-engine-from",
        type=int,
        default=1 << 30,
        help="from this concurrency on, keep one mode's KV cache in memory at a "
        "time (each timed run then gets its own warm-up run); ouro-1.4b at 1,024 "
        "requests needs it on one H200 (48 GiB of per-depth KV per mode)",
    )
    ap.add_argument("--runs", type=int, default=3, help="timed runs per mode (median)")
    ap.add_argument(
        "--waves",
        type=int,
        default=4,
        help="requests per slot: each run submits WAVES x concurrency requests "
        "with at most `concurrency` in flight, refilled as requests finish (default "
        "4: steady state; 1: one batch that starts together and waits for its "
        "slowest request)",
    )
    ap.add_argument("--quick", action="store_true", help="CPU smoke: concurrency 1,4,64, 16 tokens")
    ap.add_argument("--json", default=None, help="write the result rows to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.concurrency, args.max_tokens = "1,4,64", 16
    for name in ("runs", "waves"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    device = torch.device(args.device)
    dtype = (
        getattr(torch, args.dtype)
        if args.dtype
        else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    )
    conc = [int(c) for c in args.concurrency.split(",")]
    kinds = args.kinds.split(",")

    t0 = time.perf_counter()
    model = build_model(ModelConfig.preset(args.preset), device, dtype)
    print(
        f"# preset={args.preset} device={device} dtype={dtype} K={args.k} "
        f"d={args.draft_loops} max_tokens={args.max_tokens} waves={args.waves} "
        f"(model built in "
        f"{time.perf_counter() - t0:.1f}s)",
        flush=True,
    )
    spec = SpeculativeConfig(args.k, "block", args.draft_loops)
    vocab = model.cfg.vocab_size
    rows = []
    header = (
        f"{'conc':>5} {'kind':>7} | "
        + " | ".join(f"{m:>18}" for m in MODES)
        + f" | {'sync/ns':>7} {'async/ns':>8} | {'accept':>6} | bound C/B  as/C"
        + " | MFU ns/as | peak GiB (ns/sy/as)"
    )
    print(header)
    element = torch.empty((), dtype=dtype).element_size()
    mean_prompt = statistics.mean(len(p) for p in prompts(8, vocab))
    try:  # tokens attended on average: the prompt and half the generation
        costs = tb.model_costs(model.cfg, mean_prompt + args.max_tokens / 2, element)
    except ValueError:
        costs = None  # a Llama-family checkpoint: no bounds stated
    peak_flops = tb.matmul_flops_per_s(device, dtype) if device.type == "cuda" else None
    if costs is not None:
        if peak_flops:
            print(f"# matmul rate {peak_flops / 1e12:.0f} TFLOP/s ({dtype}, 8192^3, measured)")
        print(
            f"# bounds (bench/throughput_bounds.py): R={costs.loops} loops, per token "
            f"{costs.loop_flops / 1e6:.1f} MFLOP a loop and {costs.head_flops / 1e6:.1f} "
            f"MFLOP the head; weights {costs.loop_bytes / 2**20:.1f} MiB a loop and "
            f"{costs.head_bytes / 2**20:.1f} MiB the head; C: compute bound, B: bandwidth "
            "bound of async/nospec from async's measured tokens and drafts per round",
            flush=True,
        )
    for c in conc:
        # One engine per mode with `c` slots (sharing the model): at most c requests in
        # flight, refilled from the queue as requests finish when --waves > 1.
        common = dict(
            model=model, device=device, max_num_seqs=c, use_cuda_graphs=not args.no_graphs
        )
        engines = {
            "nospec": LLM(**common),
            "sync": LLM(speculative_config=spec, **common),
            "async": LLM(speculative_config=spec, async_scheduling=True, **common),
        }
        for engine in engines.values():
            capture_at_first_use(engine)
        ps = prompts(c * args.waves, vocab)
        per_round = {}
        for kind in kinds:
            params = sampling(kind, c * args.waves, args.max_tokens)
            # Warm-up: one identical untimed run allocates the KV cache at its final size
            # and captures the graph of every (batch, draft width) shape the timed runs
            # use; a shorter warm-up would leave cache growth and recaptures inside the
            # timed runs.
            one_engine = c >= args.one_engine_from
            if not one_engine:
                for m in MODES:
                    engines[m].generate(ps, params)
            runs = {m: [] for m in MODES}
            for m in abba(args.runs):
                if one_engine:  # only this mode's KV cache and graphs in memory
                    for e in engines.values():
                        e.close()
                    engines[m].generate(ps, params)
                runs[m].append(run_once(engines[m], ps, params, device))
            median = {m: statistics.median(r["tok_s"] for r in runs[m]) for m in MODES}
            acc = runs["async"][0]["acceptance"]
            peak = {m: max(r["peak_gib"] for r in runs[m]) for m in MODES}
            per_round[kind] = {
                m: statistics.median(r["ms_per_round"] for r in runs[m]) for m in MODES
            }
            ratio_async = median["async"] / median["nospec"]
            first = runs["async"][0]
            shape = tb.round_shape(
                first["tokens"], first["requests"], first["drafted"], first["accepted"]
            )
            bounds = (
                tb.speedup_bounds(costs, shape, args.draft_loops)
                if costs is not None and shape is not None
                else None
            )
            parts = (  # bounds exist exactly when the preset is looped and rounds ran
                tb.ratio_parts(first, runs["nospec"][0], c, shape, costs.loops, args.draft_loops)
                if bounds is not None
                else None
            )
            row = {
                "concurrency": c,
                "kind": kind,
                "tok_s": median,
                "ratio_sync": median["sync"] / median["nospec"],
                "ratio_async": ratio_async,
                "acceptance": acc,
                "tokens_per_round": shape.tokens if shape else None,
                "drafts_per_round": shape.drafts if shape else None,
                "compute_bound": bounds.compute if bounds else None,
                "bandwidth_bound": bounds.bandwidth if bounds else None,
                "pass_bound": bounds.passes if bounds else None,
                "ratio_parts": dataclasses.asdict(parts) if parts else None,
                "async_of_compute_bound": ratio_async / bounds.compute if bounds else None,
                "matmul_flops_per_s": peak_flops,
                "mfu": (
                    {
                        "nospec": median["nospec"] * tb.nospec_flops(costs) / peak_flops,
                        "async": median["async"]
                        * tb.round_flops(costs, shape)
                        / shape.tokens
                        / peak_flops,
                    }
                    if peak_flops and costs is not None and shape is not None
                    else None
                ),
                "peak_gib": peak,
                "ms_per_round": per_round[kind],
                "runs": runs,
            }
            rows.append(row)
            # Written after every row, so a run cut short (bench/speed_at_bound.py's
            # time limits) keeps the rows it finished.
            _write_json(args, device, dtype, rows)
            cells = " | ".join(f"{median[m]:>12.1f} tok/s" for m in MODES)
            bound_cell = (
                f"{bounds.compute:.2f}/{bounds.bandwidth:.2f} {ratio_async / bounds.compute:>5.2f}"
                if bounds
                else f"{'n/a':>15}"
            )
            mfu = row["mfu"]
            mfu_cell = f"{mfu['nospec']:.3f}/{mfu['async']:.3f}" if mfu else f"{'n/a':>11}"
            print(
                f"{c:>5} {kind:>7} | {cells} | {row['ratio_sync']:>7.2f} "
                f"{ratio_async:>8.2f} | {acc if acc is not None else 0:>6.3f} | {bound_cell} | "
                f"{mfu_cell} | " + "/".join(f"{peak[m]:.2f}" for m in MODES),
                flush=True,
            )
            print(
                "#      prefill batches per run (ns/sy/as): "
                + "/".join(str(runs[m][0]["prefills"]) for m in MODES)
                + f"; async slots refilled a round early: {runs['async'][0]['released_early']}",
                flush=True,
            )
            if parts is not None:
                print(
                    f"#      async/nospec {parts.ratio:.3f} (first runs) = tokens per slot-round "
                    f"{parts.slot_tokens:.3f}/{parts.nospec_slot_tokens:.3f} (occupancy "
                    f"{parts.occupancy:.3f} of tau {shape.tokens:.3f}) over ms per round/step "
                    f"{parts.round_ms:.2f}/{parts.step_ms:.2f} "
                    f"({parts.round_ms / parts.step_ms:.3f}; loop passes "
                    f"{parts.passes_ratio:.3f}); pass bound {bounds.passes:.3f}",
                    flush=True,
                )
        for e in engines.values():  # free this concurrency's KV caches and graphs
            e.close()
        if {"greedy", "random"} <= per_round.keys():
            g, r = per_round["greedy"], per_round["random"]
            ratio = {m: r[m] / g[m] for m in MODES}
            rows.append({"concurrency": c, "kind": "random/greedy per round", "ratio": ratio})
            print(
                f"{c:>5} {'r/g':>7} | "
                + " | ".join(f"{g[m]:>6.2f}->{r[m]:>6.2f} ms {ratio[m]:>4.2f}x" for m in MODES)
                + "   (time per round, greedy -> random)",
                flush=True,
            )
    _write_json(args, device, dtype, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
