"""Statistical tests of specconform, in the scipy.stats style: each test is a function
that returns a frozen result with ``statistic``, ``df``, ``pvalue``, ``n`` and what was
pooled. Imports numpy/scipy/statsmodels only, never torch (a reviewer recomputes every
verdict on a laptop).

- :mod:`.pooling`: the fixed, pre-registered pooling rule for sparse cells;
- :mod:`.gof`: Pearson goodness of fit against an exact law, two-sample homogeneity;
- :mod:`.aggregate`: sums of χ² over independent strata, Bonferroni under dependence;
- :mod:`.rate`: one event rate against its exact value (rejection rate vs TV);
- :mod:`.speculative`: exact first-position laws (TV, joint accept/reject cells);
- :mod:`.cells`: stratification and alignment of token counts with sparse laws.
"""
from .aggregate import AggregateResult, BonferroniResult, bonferroni, sum_chi2
from .cells import align, on_union, strata
from .gof import GofResult, HomogeneityResult, pearson_gof, pearson_homogeneity
from .pooling import Pooling, pool_cells
from .rate import RateResult, rate_test
from .speculative import joint_cells, total_variation

__all__ = [
    "AggregateResult", "BonferroniResult", "GofResult", "HomogeneityResult", "Pooling",
    "RateResult", "align", "bonferroni", "joint_cells", "on_union", "pearson_gof",
    "pearson_homogeneity", "pool_cells", "rate_test", "strata", "sum_chi2",
    "total_variation",
]
