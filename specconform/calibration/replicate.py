"""Replications of a protocol on exact laws and what they measure (see
:mod:`specconform.calibration`): :func:`replicate` records every test row and the verdict
as the Evaluation states them; :func:`summarize` gives rejection rates with
Clopper-Pearson intervals, :func:`second_level` NIST-style uniformity of the p-values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from specconform.calibration.world import World, evaluate_frames, simulate

RUN_COLUMNS = ["replication", "test", "role", "pvalue", "passed", "rejected", "verdict"]


def replicate(
    world: World,
    protocol: dict,
    replications: int,
    seed: int,
    *,
    mutant: str | None = None,
    start: int = 0,
    n_seeds: int | None = None,
) -> pd.DataFrame:
    """One row per replication and test (``RUN_COLUMNS``), the verdict as evaluated.

    ``protocol`` is the validated protocol data (its groups, tests, strata, α and
    decision rule all come from it); ``n_seeds`` defaults to its ``seeds.count``.
    Replication r uses numpy's generator seeded with (seed, r) and the seed range
    ``r * 10 * n_seeds`` (disjoint across replications, like fresh runs).
    """
    groups = protocol["groups"]
    return replicate_draws(
        protocol,
        world.reference,
        lambda n, rng, offset: simulate(world, n, rng, offset=offset, mutant=mutant, groups=groups),
        replications,
        seed,
        start=start,
        n_seeds=n_seeds,
    )


def replicate_draws(
    protocol: dict,
    reference,
    draw: Callable[[int, np.random.Generator, int], pd.DataFrame],
    replications: int,
    seed: int,
    *,
    start: int = 0,
    n_seeds: int | None = None,
) -> pd.DataFrame:
    """:func:`replicate` for any sampler: ``draw(n_seeds, rng, offset)`` gives one
    replication's samples.csv, judged against ``reference`` (the World's)."""
    n_seeds = int(n_seeds or protocol["seeds"]["count"])
    alpha = float(protocol["alpha"])
    out = []
    for r in range(start, start + replications):
        rng = np.random.default_rng([seed, r])
        samples = draw(n_seeds, rng, r * 10 * n_seeds)
        ev = evaluate_frames(protocol, samples, reference)
        for row in ev.tests:
            # Rejection: a failed row; exploratory rows (never deciding) at p < alpha.
            rejected = row.passed is False or (
                row.passed is None and row.pvalue is not None and row.pvalue < alpha
            )
            out.append(
                (r, row.test, row.role, row.pvalue, row.passed, rejected, ev.verdict.verdict)
            )
    return pd.DataFrame(out, columns=RUN_COLUMNS)


def summarize(runs: pd.DataFrame, alpha: float, level: float = 0.99) -> pd.DataFrame:
    """Per test: rejections, replications, rate, Clopper-Pearson interval at ``level``,
    and whether the nominal ``alpha`` lies inside it. The verdict's row is 'VERDICT'."""
    from statsmodels.stats.proportion import proportion_confint

    per = runs.groupby("test", sort=False).agg(
        role=("role", "first"), rejections=("rejected", "sum"), replications=("rejected", "size")
    )
    verdict = runs.drop_duplicates("replication")
    per.loc["VERDICT"] = ["verdict", int((verdict["verdict"] == "FAIL").sum()), len(verdict)]
    per["rate"] = per["rejections"] / per["replications"]
    lo, hi = proportion_confint(
        per["rejections"].astype(int),
        per["replications"].astype(int),
        alpha=1 - level,
        method="beta",
    )
    per["ci_low"], per["ci_high"] = np.asarray(lo), np.asarray(hi)
    per["alpha_inside"] = (per["ci_low"] <= alpha) & (alpha <= per["ci_high"])
    return per.reset_index()


@dataclass(frozen=True)
class SecondLevel:
    """NIST SP 800-22-style checks of one test's p-values across replications: KS and
    10-bin χ² uniformity p-values, the proportion passing (p ≥ α) and NIST's acceptable
    range for it, (1 − α) ± 3 sqrt(α (1 − α) / m)."""

    test: str
    m: int
    ks_pvalue: float
    chi2_pvalue: float
    proportion: float
    range_low: float
    range_high: float

    @property
    def proportion_ok(self) -> bool:
        return self.range_low <= self.proportion <= self.range_high


def second_level(runs: pd.DataFrame, alpha: float) -> list[SecondLevel]:
    out = []
    for test, frame in runs.groupby("test", sort=False):
        p = pd.to_numeric(frame["pvalue"], errors="coerce").to_numpy(dtype=float)
        p = p[np.isfinite(p)]
        if p.size < 10:
            continue
        ks = float(sps.kstest(p, "uniform").pvalue)
        bins = np.bincount(np.minimum((p * 10).astype(int), 9), minlength=10)
        chi = float(sps.chisquare(bins).pvalue)
        half = 3 * np.sqrt(alpha * (1 - alpha) / p.size)
        out.append(
            SecondLevel(
                str(test),
                int(p.size),
                ks,
                chi,
                float(np.mean(p >= alpha)),
                1 - alpha - half,
                min(1.0, 1 - alpha + half),
            )
        )
    return out


def deciding_tests(protocol: dict) -> list[dict]:
    """The protocol's α-level deciding tests (its decision_roles, else prerequisite and
    primary); the out-of-support row decides too but cannot false-fail on exact laws."""
    roles = protocol.get("decision_roles") or ("prerequisite", "primary")
    return [t for t in protocol["tests"] if t["role"] in roles]


def verdict_bound(protocol: dict) -> float:
    """Union bound on the verdict's false-fail rate when each deciding test runs at the
    protocol's α: m · α (m deciding tests)."""
    return min(1.0, len(deciding_tests(protocol)) * float(protocol["alpha"]))


def stated_verdict_rate(protocol: dict) -> float:
    """The false-fail rate the protocol file states for its verdict: the family-wise α of
    a ``verdict:`` block when it has one, else its ``alpha``."""
    block = protocol.get("verdict") or {}
    return (
        float(block.get("alpha", protocol["alpha"]))
        if isinstance(block, dict)
        else float(protocol["alpha"])
    )
