"""Combining per-stratum, per-group or per-test results into one decision.

Three combination rules, chosen by the dependence between the parts:

- :func:`sum_chi2` sums χ² statistics and df across strata. Valid because strata of
  one group are disjoint sets of independent samples: conditionally on the strata
  sizes the per-stratum statistics are independent, and a sum of independent χ²
  variables is χ² with the summed df.
- :func:`bonferroni` combines p-values of tests that may be arbitrarily dependent
  (groups that share seeds can share randomness, so their t1 draws can be
  identical): ``p = min(1, m * min p_i)`` is valid under any dependence because
  P(min p_i <= a/m) <= sum P(p_i <= a/m) <= a.
- :func:`simes` combines p-values of tests on seed-sharing groups without Bonferroni's
  waste: ``p = min_i m p_(i) / i`` (Simes 1986). Exact under independence, valid under
  positive regression dependence (Sarkar 1998), and equal to the common p-value when
  the parts are identical (groups that share seeds and randomness draw the same t1:
  Bonferroni would then test at alpha / m for nothing). Under arbitrary (negative)
  dependence its level can exceed alpha; seed-sharing groups of one engine are
  positively dependent by construction. tests/toolkit/test_numerics_simes.py measures
  its level on exact laws for identical, overlapping and independent groups.
- :func:`adjust` gives every test of a family its adjusted p-value (Holm's step-down
  or Bonferroni's), so that "every adjusted p >= alpha" keeps the family-wise
  false-fail rate <= alpha under any dependence between the tests (Holm 1979: the
  step-down needs no independence). statsmodels computes the adjustment.

A part with no evidence (df 0, an empty stratum list) has p-value NaN, never 1: the
caller decides what "no evidence" means for its role.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

COMBINE_METHODS = {"holm": "holm", "bonferroni": "bonferroni"}  # ours -> statsmodels'
COMBINE_LABELS = {"holm": "Holm", "bonferroni": "Bonf"}  # p_Holm, p_Bonf


@dataclass(frozen=True)
class AggregateResult:
    """Sum of independent χ² results: statistic and df summed, p from the χ² tail
    (NaN when nothing was testable: df 0 and no out-of-support observation)."""

    statistic: float
    df: int
    pvalue: float
    n: int
    strata: int

    @property
    def has_evidence(self) -> bool:
        return bool(np.isfinite(self.pvalue))


@dataclass(frozen=True)
class BonferroniResult:
    """Bonferroni combination of ``m`` possibly dependent p-values."""

    pvalue: float
    m: int
    pvalues: tuple[float, ...]
    argmin: int  # index of the smallest p-value (the part that decides), -1 if m == 0


def sum_chi2(results: Iterable) -> AggregateResult:
    """Sum ``statistic``/``df``/``n`` of χ² results (objects with those attributes).

    An infinite statistic (out-of-support observation) makes the aggregate infinite
    with p-value 0; a total df of 0 (nothing testable) gives statistic 0 and p-value NaN.
    """
    results = list(results)
    stat = float(sum(r.statistic for r in results))
    df = int(sum(r.df for r in results))
    n = int(sum(r.n for r in results))
    if np.isinf(stat):
        return AggregateResult(float("inf"), df, 0.0, n, len(results))
    if df == 0:
        return AggregateResult(stat, 0, float("nan"), n, len(results))
    return AggregateResult(stat, df, float(sps.chi2.sf(stat, df)), n, len(results))


def bonferroni(pvalues: Sequence[float]) -> BonferroniResult:
    """``min(1, m * min p_i)`` over the parts with a p-value (NaN parts have no evidence
    and are left out of m); no part with a p-value gives NaN."""
    ps = tuple(float(p) for p in pvalues)
    finite = [i for i, p in enumerate(ps) if np.isfinite(p)]
    if not finite:
        return BonferroniResult(float("nan"), 0, ps, -1)
    i = min(finite, key=lambda j: ps[j])
    return BonferroniResult(min(1.0, len(finite) * ps[i]), len(finite), ps, i)


def simes(pvalues: Sequence[float]) -> BonferroniResult:
    """Simes' combination ``min_i m * p_(i) / i`` over the parts with a p-value (NaN
    parts have no evidence and are left out of m); none gives NaN. Returned in
    BonferroniResult's shape (``argmin``: the part with the smallest p)."""
    ps = tuple(float(p) for p in pvalues)
    finite = [i for i, p in enumerate(ps) if np.isfinite(p)]
    if not finite:
        return BonferroniResult(float("nan"), 0, ps, -1)
    m = len(finite)
    ordered = sorted(ps[j] for j in finite)
    combined = min(m * p / rank for rank, p in enumerate(ordered, start=1))
    i = min(finite, key=lambda j: ps[j])
    return BonferroniResult(min(1.0, combined), m, ps, i)


def adjust(pvalues: Sequence[float], method: str) -> tuple[float, ...]:
    """Family-adjusted p-values ([m], same order) by ``method`` ("holm" | "bonferroni").

    Every p-value must be finite: a test with no evidence has no place in the family
    (its caller fails it outright)."""
    if method not in COMBINE_METHODS:
        raise ValueError(
            f"unknown combination {method!r}; expected one of {sorted(COMBINE_METHODS)}"
        )
    ps = np.asarray(pvalues, dtype=np.float64)
    if ps.size == 0:
        return ()
    if not np.all(np.isfinite(ps)) or np.any((ps < 0) | (ps > 1)):
        raise ValueError("family p-values must be finite and lie in [0, 1]")
    _, adjusted, _, _ = multipletests(ps, alpha=0.05, method=COMBINE_METHODS[method])
    return tuple(float(p) for p in adjusted)
