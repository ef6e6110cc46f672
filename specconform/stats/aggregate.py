"""Combining per-stratum or per-group results into one decision.

Two combination rules, chosen by the dependence between the parts:

- :func:`sum_chi2` sums χ² statistics and df across strata. Valid because strata of
  one group are disjoint sets of independent samples: conditionally on the strata
  sizes the per-stratum statistics are independent, and a sum of independent χ²
  variables is χ² with the summed df.
- :func:`bonferroni` combines p-values of tests that may be arbitrarily dependent
  (groups that share seeds can share randomness, so their t1 draws can be
  identical): ``p = min(1, m * min p_i)`` is valid under any dependence because
  P(min p_i <= a/m) <= sum P(p_i <= a/m) <= a.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class AggregateResult:
    """Sum of independent χ² results: statistic and df summed, p from the χ² tail."""

    statistic: float
    df: int
    pvalue: float
    n: int
    strata: int


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
    with p-value 0; a total df of 0 (nothing testable) gives statistic 0, p-value 1.
    """
    results = list(results)
    stat = float(sum(r.statistic for r in results))
    df = int(sum(r.df for r in results))
    n = int(sum(r.n for r in results))
    if np.isinf(stat):
        return AggregateResult(float("inf"), df, 0.0, n, len(results))
    if df == 0:
        return AggregateResult(stat, 0, 1.0, n, len(results))
    return AggregateResult(stat, df, float(sps.chi2.sf(stat, df)), n, len(results))


def bonferroni(pvalues: Sequence[float]) -> BonferroniResult:
    """``min(1, m * min p_i)``; an empty list gives p-value 1 (nothing rejected)."""
    ps = tuple(float(p) for p in pvalues)
    if not ps:
        return BonferroniResult(1.0, 0, (), -1)
    i = int(np.argmin(ps))
    return BonferroniResult(min(1.0, len(ps) * ps[i]), len(ps), ps, i)
