"""Pearson χ² goodness of fit against an exact law, and two-sample homogeneity.

Both tests apply the fixed pooling rule of :mod:`specconform.stats.pooling` to the
expected counts before calling scipy, so the pooling is determined by the law (or
the pooled margins) and the sample sizes, never by the observed counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from .pooling import pool_cells

NO_PVALUE = float("nan")  # df 0: nothing was tested (scipy returns NaN there too)


@dataclass(frozen=True)
class GofResult:
    """Pearson goodness of fit of counts against an exact law.

    ``statistic`` is inf and ``pvalue`` 0 when any observation fell on a cell of
    probability 0 (``out_of_support`` > 0): a sampler that emits an impossible token
    is wrong regardless of how many samples agree. ``pooled`` lists the original
    cells merged by the pooling rule; ``cells`` is the number of final cells;
    ``observed``/``expected`` are the final cells' counts (pooled cell last).
    """

    statistic: float
    df: int
    pvalue: float
    n: int
    pooled: tuple[int, ...]
    out_of_support: int
    cells: int
    observed: tuple[int, ...] = ()
    expected: tuple[float, ...] = ()


@dataclass(frozen=True)
class HomogeneityResult:
    """Pearson χ² homogeneity of two samples over the same cells (2 x C table).

    ``observed``/``expected`` are the two rows of final cells (pooled cell last).
    """

    statistic: float
    df: int
    pvalue: float
    n: int
    n_a: int
    n_b: int
    pooled: tuple[int, ...]
    cells: int
    observed: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    expected: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())


def _counts(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional")
    if x.size and (np.any(x < 0) or not np.all(np.equal(np.mod(x, 1), 0))):
        raise ValueError(f"{name} must hold non-negative integer counts")
    return x.astype(np.int64)


def pearson_gof(observed, probs, *, min_expected: float = 5.0) -> GofResult:
    """Pearson χ² test of ``observed`` ([C] int counts) against the law ``probs`` ([C]).

    ``probs`` is renormalized in float64 (it sums to 1 only up to rounding). Cells of
    probability 0 are excluded from the test and their observations counted as
    ``out_of_support`` (fatal: statistic inf, p-value 0). df = final cells - 1; with
    fewer than 2 final cells there is nothing to test (statistic 0, df 0, p-value 1).
    """
    obs = _counts(observed, "observed")
    p = np.asarray(probs, dtype=np.float64)
    if p.shape != obs.shape:
        raise ValueError(f"observed {obs.shape} and probs {p.shape} differ in shape")
    if np.any(p < 0) or not np.all(np.isfinite(p)) or p.sum() <= 0:
        raise ValueError("probs must be finite, non-negative and not all zero")
    p = p / p.sum()
    n = int(obs.sum())
    out_of_support = int(obs[p == 0].sum())
    pooling = pool_cells(n * p, min_expected)
    f_obs = pooling.apply(obs)
    f_exp = pooling.apply(n * p)
    df = max(pooling.cells - 1, 0)
    obs_t = tuple(int(round(v)) for v in f_obs)
    exp_t = tuple(float(v) for v in f_exp)
    if out_of_support:
        return GofResult(
            float("inf"), df, 0.0, n, pooling.pooled, out_of_support, pooling.cells, obs_t, exp_t
        )
    if pooling.cells < 2:
        return GofResult(0.0, 0, NO_PVALUE, n, pooling.pooled, 0, pooling.cells, obs_t, exp_t)
    res = sps.chisquare(f_obs, f_exp)
    return GofResult(
        float(res.statistic),
        df,
        float(res.pvalue),
        n,
        pooling.pooled,
        0,
        pooling.cells,
        obs_t,
        exp_t,
    )


def pearson_homogeneity(counts_a, counts_b, *, min_expected: float = 5.0) -> HomogeneityResult:
    """Two-sample Pearson χ² homogeneity test over the cells of ``counts_a``/``counts_b`` ([C]).

    Expected counts come from the pooled margins. The pooling rule is applied to the
    smaller row's expected counts, ``min(n_a, n_b) * col_total / N`` (same order as the
    column totals), so every cell of the final 2 x cells table has expected count >=
    ``min_expected`` whenever pooling can achieve it. Columns observed in neither
    sample carry no information and are dropped. No continuity correction. With an
    empty sample or fewer than 2 final cells: df 0, p-value NaN (no evidence).
    """
    a = _counts(counts_a, "counts_a")
    b = _counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"counts_a {a.shape} and counts_b {b.shape} differ in shape")
    n_a, n_b = int(a.sum()), int(b.sum())
    n = n_a + n_b
    if n_a == 0 or n_b == 0:
        return HomogeneityResult(0.0, 0, NO_PVALUE, n, n_a, n_b, (), 0)
    col = (a + b).astype(np.float64)
    pooling = pool_cells(min(n_a, n_b) * col / n, min_expected)
    table = np.vstack([pooling.apply(a), pooling.apply(b)])
    expected = np.outer([n_a, n_b], table.sum(axis=0)) / n
    obs_t = (tuple(int(round(v)) for v in table[0]), tuple(int(round(v)) for v in table[1]))
    exp_t = (tuple(float(v) for v in expected[0]), tuple(float(v) for v in expected[1]))
    if pooling.cells < 2:
        return HomogeneityResult(
            0.0, 0, NO_PVALUE, n, n_a, n_b, pooling.pooled, pooling.cells, obs_t, exp_t
        )
    res = sps.chi2_contingency(table, correction=False)
    return HomogeneityResult(
        float(res.statistic),
        int(res.dof),
        float(res.pvalue),
        n,
        n_a,
        n_b,
        pooling.pooled,
        pooling.cells,
        obs_t,
        exp_t,
    )
