"""Test of one event rate against its exact value: the rejection rate at the first
draft position against TV(p, q).

Decision: the exact two-sided binomial test (scipy's ``binomtest``, valid at any
sample size). The 2-cell Pearson χ² with the fixed pooling rule is reported beside it
(a χ² with df 0 when a cell is sparse: no evidence from χ², while the exact p exists).

Several strata: :func:`stratified_rate_test` combines the strata's exact p-values by
Bonferroni (``min(1, m * min p_i)``), valid under any dependence and exact-level per
stratum. A single exact test on the pooled count would need the Poisson-binomial law of
the pooled count (strata have different TV) and two-sided regions for it; Bonferroni is
simpler to audit and keeps the stated level, at some cost in power when many strata
exist (the issue's planner measures that cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as sps

from .aggregate import bonferroni
from .gof import pearson_gof


@dataclass(frozen=True)
class RateResult:
    """``k`` events in ``n`` trials against the exact rate ``p0``.

    ``pvalue`` is the exact two-sided binomial p-value (the decision); ``chi2_*`` the
    2-cell Pearson χ² (cells: no event, event) after pooling, NaN p when df is 0. An
    event observed when ``p0`` is 0 (or a non-event when ``p0`` is 1) is out of support:
    χ² inf and both p-values 0. ``n`` 0: p-value NaN (no evidence).
    """

    pvalue: float
    n: int
    k: int
    p0: float
    chi2_statistic: float
    chi2_df: int
    chi2_pvalue: float
    pooled: tuple[int, ...]
    out_of_support: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def statistic(self) -> float:
        """The observed rate k/n: the binomial test's statistic (as scipy's)."""
        return self.rate


def rate_test(k: int, n: int, p0: float, *, min_expected: float = 5.0) -> RateResult:
    """Test that ``k`` of ``n`` independent trials are events of exact probability ``p0``."""
    k, n, p0 = int(k), int(n), float(p0)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"p0 must lie in [0, 1], got {p0}")
    gof = pearson_gof([n - k, k], [1.0 - p0, p0], min_expected=min_expected)
    exact = float(sps.binomtest(k, n, p0).pvalue) if n else float("nan")
    if gof.out_of_support:
        exact = 0.0
    return RateResult(
        exact, n, k, p0, gof.statistic, gof.df, gof.pvalue, gof.pooled, gof.out_of_support
    )


@dataclass(frozen=True)
class StratifiedRateResult:
    """Strata of one rate test: Bonferroni over the strata's exact binomial p-values."""

    pvalue: float  # NaN when no stratum was tested
    n: int
    k: int
    strata: tuple[RateResult, ...]
    deciding_stratum: int  # index of the smallest p-value, -1 when none

    @property
    def expected_events(self) -> float:
        return float(sum(s.n * s.p0 for s in self.strata))


def stratified_rate_test(results: Sequence[RateResult]) -> StratifiedRateResult:
    comb = bonferroni([r.pvalue for r in results])
    return StratifiedRateResult(
        comb.pvalue,
        sum(r.n for r in results),
        sum(r.k for r in results),
        tuple(results),
        comb.argmin,
    )
