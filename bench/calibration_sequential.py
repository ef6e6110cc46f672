"""Sequential (anytime-valid) mode, simulated: false-fail rate under continuous monitoring
and seeds-to-verdict under each planted bug, against the fixed-N tests.

Null: R replications of the protocol's groups from exact laws (bench/calibration_reference.py's
references) up to a budget of B seeds per group; the e-process of
specconform.stats.eprocess is checked after *every* seed, and a replication false-fails if
it ever reaches 1/alpha. Bugs: the first seed at which it does (seeds-to-verdict), with the
kill rate within the budget, next to the fixed-N seeds-to-kill of the protocol's best
deciding test (predicted from exact laws, bench/kill_matrix.py).

    .venv/bin/python bench/calibration_sequential.py protocols/ci_gate.yaml \
        --replications 1000 --budget 2000 --power-replications 100 --power-budget 5000
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import numpy as np
from calibration_reference import load
from statsmodels.stats.proportion import proportion_confint

from specconform.calibration import MUTANTS, simulate, world_from_reference
from specconform.stats.eprocess import sequential_test

_STATE: dict = {}


def _init(job):
    _STATE["job"], _STATE["world"] = job, world_from_reference(job["reference"])


def _chunk(args):
    start, count, budget, seed, mutant = args
    pr, w = _STATE["job"]["protocol"], _STATE["world"]
    out = []
    for r in range(start, start + count):
        s = simulate(
            w,
            budget,
            np.random.default_rng([seed, r]),
            groups=pr["groups"],
            offset=r * 10 * budget,
            mutant=mutant,
        )
        out.append(sequential_test(pr, w, s).crossed_at)
    return out


def crossings(job, reps, budget, seed, workers, mutant=None) -> list[int | None]:
    size = max(1, -(-reps // (4 * workers)))
    jobs = [(s, min(size, reps - s), budget, seed, mutant) for s in range(0, reps, size)]
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(job,)) as pool:
        return [c for part in pool.map(_chunk, jobs) for c in part]


def _low(k, n):
    return proportion_confint(k, n, alpha=0.01, method="beta")[0]


def _ci(k, n):
    lo, hi = proportion_confint(k, n, alpha=0.01, method="beta")
    return f"{k}/{n} = {k / n:.4f} [{lo:.4f}, {hi:.4f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--replications", type=int, default=1000)
    ap.add_argument("--budget", type=int, default=None, help="default: the protocol's seeds")
    ap.add_argument("--power-replications", type=int, default=100)
    ap.add_argument("--power-budget", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=20260516)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    job = load(args.protocol)
    pr = job["protocol"]
    alpha = float(pr["alpha"])
    budget = args.budget or int(pr["seeds"]["count"])
    t0 = time.perf_counter()
    null = crossings(job, args.replications, budget, args.seed, args.workers)
    k = sum(c is not None for c in null)
    lines = [
        f"### Sequential mode, `{args.protocol}`: e-process checked after every seed, "
        f"FAIL at 1/alpha = {1 / alpha:g}\n",
        f"Null (exact laws, {args.replications} replications, budget {budget:,} seeds "
        f"per group): false fails {_ci(k, args.replications)}; Ville's bound "
        f"alpha = {alpha}: {'consistent' if _low(k, args.replications) <= alpha else 'ABOVE'}"
        ".\n",
        f"Bugs ({args.power_replications} replications, budget {args.power_budget:,} "
        "seeds per group):\n",
        "| bug | FAIL within budget (99 % CP) | seeds to verdict: median [quartiles] |",
        "| --- | --- | --- |",
    ]
    for m in MUTANTS:
        c = crossings(
            job, args.power_replications, args.power_budget, args.seed + 1, args.workers, m
        )
        hit = np.array([x for x in c if x is not None])
        # Quartiles of seeds-to-verdict, a run that never crossed counting as > budget.
        q = np.percentile(
            [x if x is not None else math.inf for x in c], [25, 50, 75], method="inverted_cdf"
        )
        fmt = ["> budget" if math.isinf(v) else f"{v:,.0f}" for v in q]
        lines.append(f"| {m} | {_ci(hit.size, len(c))} | {fmt[1]} [{fmt[0]}, {fmt[2]}] |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append(f"\n(wall time {time.perf_counter() - t0:.0f} s, {args.workers} workers)\n")
    text = "\n".join(lines)
    Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
