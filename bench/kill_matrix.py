"""Kill matrix from exact laws: each planted bug's power against each deciding test of a
protocol at its size, and the seeds it takes to kill, against a noncentral-χ² oracle.

For every engine-free bug (specconform.calibration.MUTANTS) on the protocol's exact laws
(the same references as bench/calibration_reference.py):

- **measured**: the fraction of R replications (default 200, from
  `calibration_reference.py --mutant M --runs-out`, or run here) whose verdict FAILs, and
  each deciding test's rejection rate, with 99 % Clopper-Pearson intervals;
- **predicted** from the bug's exact first-position law (specconform.stats.mutant_laws):
  noncentral χ² at the test's df and noncentrality on its pooled cells, combined with
  the probability of an out-of-support sample (specconform.planning.mutant_power);
- **seeds to kill**: the smallest seeds per group at which the best deciding test's
  predicted power reaches 0.99, against the oracle: a 1-df test on the joint (accept /
  reject, t2) cells of every t1 stratum, unpooled (specconform.planning.oracle_seeds).
  Never from one run's statistic, and an infinite statistic is not a power of 1.

Then the bundled engine's engine-only bugs (bench/kill_matrix_laws.py: their exact laws,
sampled engine-free; the protocol's reference needs the unfiltered ``raw`` block of
bench/calibration_make_reference.py for four of them): the verdict's measured FAIL rate
over R replications, the killing test with its exact-law power (deciding tests, the
out-of-support row's exact probability, or shared_rng's deterministic t1 statistic) and
the seeds to kill.

    .venv/bin/python bench/kill_matrix.py protocols/ci_gate.yaml --runs /tmp/power-cal \
        --out docs/kill-matrix-ci_gate.md
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import pandas as pd
from calibration_reference import load, run
from kill_matrix_laws import ENGINE_BUGS, run_engine_bug
from statsmodels.stats.proportion import proportion_confint

from specconform.calibration import MUTANTS, deciding_tests, world_from_reference
from specconform.planning import (
    mutant_power,
    oracle_seeds,
    planning_level,
    support_power,
)
from specconform.stats.mutant_laws import EXACT, NEEDS_RAW, one_sequence_statistic

# The bundled engine's planted bugs and their engine-free equivalent here (None: its law
# needs the engine's logits or batch layout, not derivable from reference.json).
ENGINE_EQUIVALENT = {
    "residual_from_p": "residual_from_p",
    "bonus_off_by_one": "bonus_off_by_one",
    "shared_uniform": "shared_uniform",
    "greedy_draft": "greedy_draft",
    "no_draft_probs": "q_one_hot",
    "bf16_q": "bf16_q",
    # Engine-only: exact laws in specconform.stats.mutant_laws, sampled by
    # bench/kill_matrix_laws.py (the engine-only table).
    "target_default_params": None,
    "draft_raw_q": None,
    "residual_inplace": None,
    "bonus_params": None,
    "shared_rng": None,
    "async_stale_input": None,
}


def _ci(k: int, n: int) -> str:
    lo, hi = proportion_confint(k, n, alpha=0.01, method="beta")
    return f"{k}/{n} [{lo:.3f}, {hi:.3f}]"


def seeds_to_kill(protocol, world, mutant, power=0.99, cap=10**8) -> tuple[float, str]:
    """Smallest seeds per group at which some deciding test's predicted power >= power."""

    def best(n):
        rows = [r for r in mutant_power(protocol, world, mutant, n) if r.deciding and r.exact]
        top = max(rows, key=lambda r: r.power, default=None)
        return (top.power, top.test) if top else (0.0, "")

    lo, hi = 1, 2
    while best(hi)[0] < power and hi < cap:
        lo, hi = hi, hi * 2
    if best(hi)[0] < power:
        return math.inf, ""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if best(mid)[0] >= power else (mid, hi)
    return float(hi), best(hi)[1]


def _fmt(x: float) -> str:
    return "∞" if math.isinf(x) else f"{int(x):,}"


def matrix(path: str, runs_dir: str | None, replications: int, workers: int, seed: int) -> str:
    job = load(path)
    protocol, world = job["protocol"], world_from_reference(job["reference"])
    n = int(protocol["seeds"]["count"])
    alpha = float(protocol["alpha"])
    deciding = [t["name"] for t in deciding_tests(protocol)]
    depths = sorted({g["draft_loops"] for g in protocol["groups"] if g.get("draft_loops")})
    groups = {g["name"]: g for g in protocol["groups"]}
    floor = math.ceil(
        int((protocol.get("strata") or {}).get("min_samples", 200)) / float(world.p1.max())
    )
    lines = [
        f"### `{path}`: {n:,} seeds per group, alpha = {alpha}; "
        f"{planning_level(protocol)[1]}. Below {floor:,} seeds no t1 stratum is "
        "expected to reach min_samples (the floor of the stratified tests' seeds-to-kill; "
        "joint_score takes every stratum).\n",
        "| bug | verdict FAIL, measured (99 % CP) | best deciding test, predicted power "
        "| seeds to kill (predicted, test) | oracle seeds "
        + " / ".join(f"d={d}" for d in depths)
        + " (predicted) | test / oracle (same depth, predicted) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    shown = [*deciding, "out_of_support"]  # the evaluator's always-deciding support row
    detail = ["\n| bug | " + " | ".join(shown) + " |", "| --- |" + " --- |" * len(shown)]
    for m in [None, *MUTANTS]:  # None: the correct sampler on the same seeds (control)
        csv = Path(runs_dir or "/nonexistent") / f"{protocol['name']}_{m or 'none'}.csv"
        if csv.exists() or replications > 0:
            runs = pd.read_csv(csv) if csv.exists() else run(job, replications, seed, workers, m)
            reps = runs.drop_duplicates("replication")
            measured = _ci(int((reps["verdict"] == "FAIL").sum()), len(reps))
            per = runs.groupby("test")["rejected"].agg(["sum", "size"])
        else:  # --replications 0: predicted only
            measured, per = "not run", pd.DataFrame(columns=["sum", "size"])
        if m is None:
            pred, cells = {}, ("(size)", "—", "—", "—")
        elif m in EXACT:
            pred = {r.test: r for r in mutant_power(protocol, world, m, n)}
            best = max((pred[t] for t in deciding if t in pred), key=lambda r: r.power)
            need, by = seeds_to_kill(protocol, world, m)
            oracle = [oracle_seeds(world, m, d, alpha) for d in depths]
            # Against the oracle at the depth of the killing test's group (t2 homogeneity
            # and gof tests name the speculative group first).
            spec = next((t for t in protocol["tests"] if t["name"] == by), None)
            d = groups[spec["groups"][0]].get("draft_loops") if spec else None
            ref_oracle = oracle[depths.index(d)] if d in depths else min(oracle)
            ratio = need / ref_oracle if math.isfinite(need) and ref_oracle > 0 else math.inf
            cells = (
                f"{best.power:.3f} ({best.test})",
                f"{_fmt(need)} ({by or 'no deciding test sees it'})",
                " / ".join(_fmt(o) for o in oracle),
                "—" if math.isinf(ratio) else f"{ratio:.1f}x",
            )
        else:
            pred, cells = {}, ("not derived (t3 law)", "—", "—", "—")
        lines.append(f"| {m or '(correct sampler)'} | {measured} | " + " | ".join(cells) + " |")
        row = []
        for t in shown:
            meas = f"{int(per.loc[t, 'sum'])}/{int(per.loc[t, 'size'])}" if t in per.index else "—"
            p = pred.get(t)
            row.append(meas + (f" (pred {p.power:.2f})" if p is not None else ""))
        detail.append(f"| {m or '(correct sampler)'} | " + " | ".join(row) + " |")
    lines += ["\nPer deciding test: rejections measured / replications (predicted power):"]
    return "\n".join(lines + detail) + "\n"


def _needs_raw(bug: str) -> bool:
    return bug in (*NEEDS_RAW, "bonus_params", "async_stale_input")


def kill_probability(protocol, world, bug: str, n: int) -> tuple[float, str]:
    """The exact-law probability that the verdict fails through its likeliest killer at
    ``n`` seeds per group: max over the deciding tests' predicted power and the
    out-of-support row's exact probability (a lower bound on the verdict's power)."""
    if bug == "shared_rng":
        return _one_sequence(protocol, world, n)
    rows = [r for r in mutant_power(protocol, world, bug, n) if r.deciding]
    best = max(rows, key=lambda r: r.power)
    oos = support_power(protocol, world, bug, n)
    return (oos, "out_of_support") if oos >= best.power else (best.power, best.test)


def _one_sequence(protocol, world, n: int) -> tuple[float, str]:
    """shared_rng with one batch per group: every t1 of t1_nospec is the same token, so
    its χ² is at least one_sequence_statistic (deterministic): power 1 when that bound's
    p-value is below the Holm first-step level alpha/m, else not claimed (0)."""
    from scipy import stats as sps

    from specconform.stats.pooling import pool_cells

    batch = int(protocol["engine"].get("batch_size") or n)
    if batch < n:
        return 0.0, "not derived (several batches per group)"
    min_expected = float((protocol.get("strata") or {}).get("min_expected", 5.0))
    stat = one_sequence_statistic(world.p1, n, min_expected)
    df = pool_cells(n * world.p1, min_expected).cells - 1
    level = planning_level(protocol)[0]
    return (1.0 if sps.chi2.sf(stat, df) < level else 0.0), "t1_nospec"


def engine_seeds_to_kill(protocol, world, bug: str, power=0.99, cap=10**7) -> tuple[float, str]:
    lo, hi = 1, 2
    while kill_probability(protocol, world, bug, hi)[0] < power and hi < cap:
        lo, hi = hi, hi * 2
    if kill_probability(protocol, world, bug, hi)[0] < power:
        return math.inf, ""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if kill_probability(protocol, world, bug, mid)[0] >= power else (mid, hi)
    return float(hi), kill_probability(protocol, world, bug, hi)[1]


def engine_matrix(path: str, runs_dir, replications: int, workers: int, seed: int) -> str:
    """The bundled engine's engine-only bugs from their exact laws (bench/kill_matrix_laws)."""
    job = load(path)
    protocol, world = job["protocol"], world_from_reference(job["reference"])
    n = int(protocol["seeds"]["count"])
    has_raw = "raw" in job["reference"]
    shown = [*(t["name"] for t in deciding_tests(protocol)), "out_of_support"]
    lines = [
        f"### `{path}`, engine-only bugs: {n:,} seeds per group, exact laws "
        f"`{job['reference_path']}`\n",
        "| bug | verdict FAIL, measured (99 % CP) | killed by (predicted: exact-law power) "
        "| seeds to kill (predicted, power 0.99) |",
        "| --- | --- | --- | --- |",
    ]
    detail = ["\n| bug | " + " | ".join(shown) + " |", "| --- |" + " --- |" * len(shown)]
    for bug in ENGINE_BUGS:
        if _needs_raw(bug) and not has_raw:
            lines.append(
                f"| {bug} | not run: the reference has no unfiltered laws (raw block) | — | — |"
            )
            continue
        csv = Path(runs_dir or "/nonexistent") / f"{protocol['name']}_{bug}.csv"
        if csv.exists():
            runs = pd.read_csv(csv)
        elif replications > 0:
            runs = run_engine_bug(world, protocol, replications, seed, bug, workers)
        else:
            runs = None
        if runs is not None:
            reps = runs.drop_duplicates("replication")
            measured = _ci(int((reps["verdict"] == "FAIL").sum()), len(reps))
            per = runs.groupby("test")["rejected"].agg(["sum", "size"])
        else:
            measured, per = "not run", pd.DataFrame(columns=["sum", "size"])
        power, by = kill_probability(protocol, world, bug, n)
        need, by_need = engine_seeds_to_kill(protocol, world, bug)
        lines.append(
            f"| {bug} | {measured} | {by} ({power:.3f}) | {_fmt(need)} ({by_need or '—'}) |"
        )
        pred = (
            {}
            if bug == "shared_rng"
            else {r.test: r.power for r in mutant_power(protocol, world, bug, n)}
        )
        pred["out_of_support"] = (
            0.0 if bug == "shared_rng" else support_power(protocol, world, bug, n)
        )
        if bug == "shared_rng":
            pred["t1_nospec"] = power
        row = []
        for t in shown:
            meas = f"{int(per.loc[t, 'sum'])}/{int(per.loc[t, 'size'])}" if t in per.index else "—"
            row.append(meas + (f" (pred {pred[t]:.2f})" if t in pred else ""))
        detail.append(f"| {bug} | " + " | ".join(row) + " |")
    lines += ["\nPer deciding test: rejections measured / replications (exact-law prediction):"]
    return "\n".join(lines + detail) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocols", nargs="*", default=["protocols/ci_gate.yaml"])
    ap.add_argument(
        "--runs",
        default=None,
        help="folder of <protocol>_<mutant>.csv rows "
        "(calibration_reference.py --mutant M --runs-out); missing ones run here",
    )
    ap.add_argument(
        "--replications",
        type=int,
        default=200,
        help="per bug when no saved rows exist; 0: predicted columns only",
    )
    ap.add_argument("--seed", type=int, default=20260515)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    text = "\n".join(
        matrix(p, args.runs, args.replications, args.workers, args.seed) for p in args.protocols
    )
    text += "\n" + "\n".join(
        engine_matrix(p, args.runs, args.replications, args.workers, args.seed)
        for p in args.protocols
    )
    mapping = ["\n| bundled-engine bug | engine-free equivalent here |", "| --- | --- |"]
    mapping += [
        f"| {k} | {v or 'its own exact law (engine-only table)'} |"
        for k, v in ENGINE_EQUIVALENT.items()
    ]
    text += "\n".join(mapping) + "\n"
    Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
