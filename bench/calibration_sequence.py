"""Calibration of the sequence kind: the false-fail rate of every test and of the verdict
under the null, and the kill rate of planted bugs, at a protocol's layout.

Null: each replication runs the numpy speculative sampler (specconform/calibration/sequence_synthetic.py)
on exact Markov-chain laws for every group of the protocol -- the real group sizes,
lengths, sampling cycles, round/position/slot structure and TVs -- with fresh engine
randomness and a fresh ``pit_seed`` (fresh V_t), and evaluates it with the kind's own
evaluator (:func:`specconform.kinds.sequence.evaluate_frames`). This is the exact joint
null law (layout and U's together), not an approximation by a fixed layout.

``--layout DIR`` instead keeps the layout of a real run (DIR/raw/sequence/*.csv) fixed
and redraws what the null makes random given it: every random token's U (by setting
cdf_below 0, p_token 1, so U = V) and every drafted token's rejection ~ Bernoulli(tv).
Under the null the U's of past-measurable strata and pairings are i.i.d. uniform and
rejections are Bernoulli(TV_j) given the past; a fixed layout ignores only the
dependence of the layout on earlier outcomes.

Bugs (``--power-replications``): the sampler's planted bugs (a) tempered_position1,
(b) rounds_reuse, (c) shared_requests, (d) reject_position2, (e) residual_from_p,
(f) draft_raw_q, (g) late_round_residual, (h) shared_uniform; the kill rate of the
verdict and of each targeted test (the mechanism bugs: the mechanism_pit tests and the
out_of_support row, which holds the mechanism-out-of-support rule).

Prints Markdown tables with 99% Clopper-Pearson intervals (scipy's binomtest):

    .venv/bin/python bench/calibration_sequence.py protocols/ci_sequence.yaml \
        --replications 1000 --power-replications 200 --workers 2
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from _checkout import ROOT
from scipy import stats as sps

from specconform.calibration.sequence_synthetic import MUTANTS, make_world, simulate
from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.raw import CHECKS, REQUESTS, TOKENS
from specconform.protocol.load import load_protocol

LEVEL = 0.99
_STATE: dict = {}


def _init(protocol: dict, layout: str | None) -> None:
    # statsmodels' Holm step-down calls gc.collect() on every call: freezing what the
    # worker holds keeps that collection short (half of an evaluation's time otherwise).
    gc.freeze()
    _STATE["protocol"], _STATE["world"] = protocol, make_world(0)
    if layout:
        root = Path(layout)
        _STATE["layout"] = (
            pd.read_csv(root / REQUESTS),
            pd.read_csv(root / TOKENS),
            json.loads((root / CHECKS).read_text()),
        )


def _frames(rep: int, seed: int, mutant: str | None):
    if "layout" in _STATE:
        return _redraw(np.random.default_rng([seed, rep]))
    return simulate(_STATE["protocol"], seed * 1_000_003 + rep, mutant, _STATE["world"])


def _redraw(rng: np.random.Generator):
    """The fixed layout with fresh U's (U = V) and fresh rejections ~ Bernoulli(tv)."""
    requests, tokens, checks = _STATE["layout"]
    tokens = tokens.copy()
    in_support = tokens["p_token"] > 0
    tokens.loc[in_support, "cdf_below"], tokens.loc[in_support, "p_token"] = 0.0, 1.0
    drafted = tokens["kind"].isin(["accepted", "correction"]) & tokens["tv"].notna()
    reject = rng.random(len(tokens)) < tokens["tv"].fillna(0.0).to_numpy()
    tokens.loc[drafted, "kind"] = np.where(reject[drafted.to_numpy()], "correction", "accepted")
    return requests, tokens, checks


def _chunk(args) -> list[dict]:
    start, count, seed, mutant = args
    out = []
    for rep in range(start, start + count):
        protocol = {**_STATE["protocol"], "pit_seed": seed * 1_000_003 + rep}
        ev = evaluate_frames(protocol, *_frames(rep, seed, mutant))
        for row in ev.tests:
            out.append(
                {
                    "replication": rep,
                    "test": row.test,
                    "role": row.role,
                    "deciding": row.deciding,
                    "status": row.status,
                    "pvalue": np.nan if row.pvalue is None else row.pvalue,
                    "verdict": ev.verdict.verdict,
                }
            )
    return out


def replicate(protocol, layout, reps, seed, workers, mutant=None) -> pd.DataFrame:
    size = max(1, reps // (workers * 4))
    jobs = [(s, min(size, reps - s), seed, mutant) for s in range(0, reps, size)]
    rows: list[dict] = []
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(protocol, layout)) as pool:
        for done, part in enumerate(pool.map(_chunk, jobs), 1):
            rows += part
            print(f"\r  {mutant or 'null'}: {done}/{len(jobs)} chunks", end="", file=sys.stderr)
    print(file=sys.stderr)
    return pd.DataFrame(rows)


def _ci(k: int, n: int) -> str:
    ci = sps.binomtest(int(k), int(n)).proportion_ci(LEVEL)
    return f"{k / n:.4f} [{ci.low:.4f}, {ci.high:.4f}]"


def null_table(runs: pd.DataFrame, alpha: float, family_alpha: float) -> str:
    """Per stochastic test: FAIL rate in the family decision (deciding rows: Holm-adjusted
    p < family α), raw p < α rate, and the KS p-value of its p-values against uniform;
    then the verdict's FAIL rate."""
    lines = [
        "| test | role | FAIL rate in the verdict [99% CI] | raw p < α rate [99% CI] "
        "| KS p of the p-values | no evidence |",
        "|---|---|---|---|---|---|",
    ]
    deterministic = []
    for test, g in runs.groupby("test", sort=False):
        p = g["pvalue"].dropna().to_numpy()
        n = len(g)
        fails = int((g["status"] == "FAIL").sum())
        if p.size == 0:
            if g["deciding"].any():  # out_of_support, engine_errors, the checks
                deterministic.append(f"{test} {fails}/{n}")
            continue
        ks = sps.kstest(p, "uniform").pvalue
        lines.append(
            f"| {test} | {g['role'].iloc[0]} | {_ci(fails, n)} | {_ci(int((p < alpha).sum()), n)} "
            f"| {ks:.3f} | {int((g['status'] == 'NO_EVIDENCE').sum())} |"
        )
    v = runs.drop_duplicates("replication")
    k = int((v["verdict"] == "FAIL").sum())
    lines.append(f"| **verdict** | family α = {family_alpha:g} | {_ci(k, len(v))} | | | |")
    lines.append("")
    lines.append("Deterministic deciding rows, FAIL count: " + ", ".join(deterministic))
    return "\n".join(lines)


def power_table(results: dict[str, pd.DataFrame], targets: dict[str, list[str]]) -> str:
    lines = [
        "| planted bug | verdict kill rate [99% CI] | targeted test(s): FAIL rate [99% CI] |",
        "|---|---|---|",
    ]
    for mutant, runs in results.items():
        v = runs.drop_duplicates("replication")
        k = int((v["verdict"] == "FAIL").sum())
        parts = []
        for test in targets[mutant]:
            g = runs[runs["test"] == test]
            parts.append(f"{test} {_ci(int((g['status'] == 'FAIL').sum()), len(g))}")
        lines.append(f"| {mutant} | {_ci(k, len(v))} | {'; '.join(parts)} |")
    return "\n".join(lines)


def targets_of(protocol: dict) -> dict[str, list[str]]:
    by_type: dict[str, list[str]] = {}
    for t in protocol["tests"]:
        paired = t["type"] in ("pit_independence", "pit_correlation")
        key = f"pairs:{t['pairs']}" if paired else t["type"]
        by_type.setdefault(key, []).append(t["name"])
    mechanism = [
        *by_type.get("mechanism_pit", []),
        *by_type.get("mechanism_mean", []),
        "out_of_support",
    ]
    return {
        "tempered_position1": by_type.get("pit_uniformity", []),
        "rounds_reuse": by_type.get("pairs:rounds", []),
        "shared_requests": [
            *by_type.get("pairs:requests", []),
            *by_type.get("pairs:request_rounds", []),
        ],
        "reject_position2": by_type.get("acceptance_all", []),
        "residual_from_p": mechanism,
        "draft_raw_q": mechanism,
        "late_round_residual": mechanism,
        "shared_uniform": mechanism,
        "top_p_drop_crossing": by_type.get("crossing_count", []),
        "bonus_overlap": by_type.get("accept_after_bonus", []),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol", nargs="?", default=str(ROOT / "protocols" / "ci_sequence.yaml"))
    ap.add_argument("--replications", type=int, default=1000)
    ap.add_argument("--power-replications", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--layout", default=None, help="a run directory: keep its layout fixed")
    ap.add_argument(
        "--mutants", default=",".join(MUTANTS), help="comma-separated planted bugs to run"
    )
    args = ap.parse_args(argv)
    protocol = load_protocol(Path(args.protocol)).data
    alpha = float(protocol["alpha"])
    family_alpha = float((protocol.get("verdict") or {}).get("alpha", alpha))
    chosen = [m for m in args.mutants.split(",") if m]
    unknown = sorted(set(chosen) - set(MUTANTS))
    if unknown:
        ap.error(f"unknown mutant(s) {unknown}; known: {list(MUTANTS)}")
    t0 = time.perf_counter()
    if args.replications:
        null = replicate(protocol, args.layout, args.replications, args.seed, args.workers)
        print(f"## Null: {args.replications} replications ({time.perf_counter() - t0:.0f} s)\n")
        print(null_table(null, alpha, family_alpha))
    t_null = time.perf_counter() - t0
    if args.power_replications and args.layout is None and chosen:
        results = {}
        for i, mutant in enumerate(MUTANTS):
            if mutant not in chosen:
                continue
            results[mutant] = replicate(
                protocol, None, args.power_replications, args.seed + 1 + i, args.workers, mutant
            )
        print(
            f"\n## Planted bugs: {args.power_replications} replications each "
            f"({time.perf_counter() - t0 - t_null:.0f} s)\n"
        )
        print(power_table(results, targets_of(protocol)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
