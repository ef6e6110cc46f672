"""Test of one event rate against its exact value: the rejection rate at the first
draft position against TV(p, q).

Two views of the same count are reported: the exact binomial test (scipy's
``binomtest``, two-sided, valid at any sample size) and the 2-cell Pearson χ² with
the fixed pooling rule (1 df when both cells are dense), whose statistics add across
independent strata into one aggregate (:func:`~specconform.stats.aggregate.sum_chi2`).
"""
from __future__ import annotations

from dataclasses import dataclass

from scipy import stats as sps

from .gof import pearson_gof


@dataclass(frozen=True)
class RateResult:
    """``k`` events in ``n`` trials against the exact rate ``p0``.

    ``statistic``/``df``/``pvalue`` are the 2-cell Pearson χ² (cells: no event, event),
    ``binom_pvalue`` the exact two-sided binomial p-value. An event observed when
    ``p0`` is 0 (or a non-event when ``p0`` is 1) is out of support: statistic inf,
    both p-values 0.
    """

    statistic: float
    df: int
    pvalue: float
    n: int
    k: int
    p0: float
    binom_pvalue: float
    pooled: tuple[int, ...]
    out_of_support: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")


def rate_test(k: int, n: int, p0: float, *, min_expected: float = 5.0) -> RateResult:
    """Test that ``k`` of ``n`` independent trials are events of exact probability ``p0``."""
    k, n, p0 = int(k), int(n), float(p0)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"p0 must lie in [0, 1], got {p0}")
    gof = pearson_gof([n - k, k], [1.0 - p0, p0], min_expected=min_expected)
    binom_p = float(sps.binomtest(k, n, p0).pvalue) if n else 1.0
    if gof.out_of_support:
        binom_p = 0.0
    return RateResult(gof.statistic, gof.df, gof.pvalue, n, k, p0, binom_p, gof.pooled,
                      gof.out_of_support)
