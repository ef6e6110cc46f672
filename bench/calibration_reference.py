"""Calibrate the distribution tests on samples drawn from exact reference laws (no engine).

Runs the full evaluator (every test, pooling and stratification rule of issue 5's
fp32_t2 test list) on many replications of synthetic exact-law samples and prints, as
Markdown, each test's false-fail rate at alpha with its 99 % Clopper-Pearson interval,
the verdict's FAIL rate against its union bound, and (with --power-replications) each
test's rejection rate under every wrong sampler of specconform.calibration.MUTANTS.

    .venv/bin/python bench/calibration_reference.py --replications 1000 --seeds 5000 \
        --power-replications 200 --workers 2 > /tmp/calibration_tables.md
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from specconform.calibration import (
    MUTANTS,
    PROTOCOL,
    make_world,
    replicate,
    summarize,
    verdict_bound,
)


def _chunk(args):
    world_seed, start, count, n_seeds, seed, mutant, protocol = args
    return replicate(make_world(world_seed), count, n_seeds, seed, mutant=mutant, start=start,
                     protocol=protocol)


def run(replications: int, n_seeds: int, seed: int, world_seed: int, workers: int,
        mutant: str | None = None, protocol: dict = PROTOCOL) -> pd.DataFrame:
    size = max(1, -(-replications // (4 * workers)))  # a few chunks per worker
    jobs = [(world_seed, s, min(size, replications - s), n_seeds, seed, mutant, protocol)
            for s in range(0, replications, size)]
    if workers <= 1:
        return pd.concat(map(_chunk, jobs), ignore_index=True)
    with ProcessPoolExecutor(workers) as pool:
        return pd.concat(pool.map(_chunk, jobs), ignore_index=True)


def _nominal(test: str, alpha: float, bound: float, protocol: dict = PROTOCOL
             ) -> tuple[str, str]:
    """(nominal rate, how it is checked) for one row of the calibration table."""
    spec = next((t for t in protocol["tests"] if t["name"] == test), None)
    if test == "out_of_support":
        return "0", "no false fail"
    if test == "VERDICT":
        return f"<= {bound:g}", "CI low <= bound"
    if spec and spec["type"] == "t1_gof" and len(spec["groups"]) > 1:
        return f"<= {alpha:g} (Bonferroni)", "CI low <= alpha"
    return f"{alpha:g}", "alpha in CI"


def calibration_table(summary: pd.DataFrame, alpha: float, bound: float,
                      protocol: dict = PROTOCOL) -> str:
    lines = ["| test | role | false fails | 99 % Clopper-Pearson | nominal | check | ok |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in summary.itertuples():
        if r.test == "coverage":
            continue
        nominal, check = _nominal(r.test, alpha, bound, protocol)
        if check == "no false fail":
            ok = r.rejections == 0
        elif check == "alpha in CI":
            ok = bool(r.alpha_inside)
        else:
            ok = r.ci_low <= (bound if r.test == "VERDICT" else alpha)
        name = "**verdict FAIL**" if r.test == "VERDICT" else r.test
        lines.append(f"| {name} | {r.role} | {r.rejections}/{r.replications} = {r.rate:.4f} "
                     f"| [{r.ci_low:.4f}, {r.ci_high:.4f}] | {nominal} | {check} "
                     f"| {'yes' if ok else 'NO'} |")
    return "\n".join(lines)


def power_table(rates: dict[str, pd.DataFrame]) -> str:
    names = list(rates)
    tests = [t for t in rates[names[0]]["test"] if t != "coverage"]
    lines = ["| test | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for t in tests:
        cells = []
        for m in names:
            r = rates[m].set_index("test").loc[t]
            cells.append(f"{r.rate:.3f}")
        name = "**verdict FAIL**" if t == "VERDICT" else t
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replications", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=5000, help="seeds per group")
    ap.add_argument("--seed", type=int, default=20260514, help="simulation seed")
    ap.add_argument("--world-seed", type=int, default=0, help="synthetic laws seed")
    ap.add_argument("--power-replications", type=int, default=0)
    ap.add_argument("--mutants", nargs="*", default=sorted(MUTANTS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the Markdown here (default stdout)")
    ap.add_argument("--protocol", default=None,
                    help="a distribution protocol file whose tests and decision rule to "
                         "calibrate (groups nospec, sync, async, sync_d1, async_d1); "
                         "default: fp32_t2's test list")
    args = ap.parse_args(argv)

    protocol = PROTOCOL
    if args.protocol:
        from specconform.protocol.load import load_protocol

        protocol = load_protocol(args.protocol).data
    alpha, bound = float(protocol["alpha"]), verdict_bound(protocol)
    t0 = time.perf_counter()
    null = summarize(run(args.replications, args.seeds, args.seed, args.world_seed,
                         args.workers, protocol=protocol), alpha)
    parts = [f"### False-fail rates: {args.replications} replications x {args.seeds} seeds "
             f"per group, alpha = {alpha}\n", calibration_table(null, alpha, bound, protocol)]
    if args.power_replications:
        rates = {}
        for m in args.mutants:
            rates[m] = summarize(run(args.power_replications, args.seeds, args.seed + 1,
                                     args.world_seed, args.workers, mutant=m,
                                     protocol=protocol), alpha)
        parts += [f"\n### Rejection rates under wrong samplers: {args.power_replications} "
                  f"replications x {args.seeds} seeds per group, alpha = {alpha}\n",
                  power_table(rates)]
    parts.append(f"\n(wall time {time.perf_counter() - t0:.0f} s, {args.workers} workers)\n")
    text = "\n".join(parts)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
