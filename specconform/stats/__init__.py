"""Statistical tests of specconform, in the scipy.stats style: each test is a function
that returns a frozen result with ``statistic``, ``df``, ``pvalue``, ``n`` and what was
pooled. Imports numpy/scipy/statsmodels only, never torch (a reviewer recomputes every
verdict on a laptop).

- :mod:`.pooling`: the fixed, pre-registered pooling rule for sparse cells;
- :mod:`.gof`: Pearson goodness of fit against an exact law, two-sample homogeneity;
- :mod:`.aggregate`: sums of χ² over independent strata, Bonferroni under dependence,
  Holm/Bonferroni adjustment of a family of tests (:func:`adjust`);
- :mod:`.rate`: one event rate against its exact value (rejection rate vs TV), decided
  by the exact binomial; strata combined by Bonferroni;

A test with nothing to test (df 0) returns p-value NaN, never 1: no evidence.
- :mod:`.speculative`: exact first-position laws (TV, joint accept/reject cells);
- :mod:`.cells`: stratification and alignment of token counts with sparse laws.
"""

from .aggregate import AggregateResult, BonferroniResult, adjust, bonferroni, sum_chi2
from .cells import align, on_union, strata
from .gof import GofResult, HomogeneityResult, pearson_gof, pearson_homogeneity
from .pooling import Pooling, pool_cells
from .rate import RateResult, StratifiedRateResult, rate_test, stratified_rate_test
from .speculative import joint_cells, total_variation

__all__ = [
    "AggregateResult",
    "BonferroniResult",
    "GofResult",
    "HomogeneityResult",
    "Pooling",
    "RateResult",
    "StratifiedRateResult",
    "adjust",
    "align",
    "bonferroni",
    "joint_cells",
    "on_union",
    "pearson_gof",
    "pearson_homogeneity",
    "pool_cells",
    "rate_test",
    "strata",
    "stratified_rate_test",
    "sum_chi2",
    "total_variation",
]
