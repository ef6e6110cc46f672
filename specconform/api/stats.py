"""The statistical functions as public names, with scipy-style docstrings.

Thin wrappers over :mod:`specconform.stats` (which the protocols and `verify` use): the
same code computes every p-value in an archive, so a result reproduced from Python equals
the one the archive states. Plus :func:`detectable_tv`, the power statement the pytest
plugin prints with every failure.
"""

from __future__ import annotations

import math

from specconform.stats import aggregate as _aggregate
from specconform.stats import gof as _gof
from specconform.stats import rate as _rate
from specconform.stats import speculative as _speculative
from specconform.stats.aggregate import AggregateResult, BonferroniResult
from specconform.stats.gof import GofResult, HomogeneityResult
from specconform.stats.rate import RateResult

__all__ = [
    "AggregateResult",
    "BonferroniResult",
    "GofResult",
    "HomogeneityResult",
    "RateResult",
    "bonferroni",
    "detectable_tv",
    "joint_cells",
    "pearson_gof",
    "pearson_homogeneity",
    "rate_test",
    "sum_chi2",
    "total_variation",
]


def pearson_gof(observed, probs, *, min_expected: float = 5.0) -> GofResult:
    """Pearson χ² goodness of fit of counts against an exact law.

    Parameters
    ----------
    observed : array_like, shape (C,)
        Non-negative integer counts per cell (e.g. ``np.bincount(tokens, minlength=C)``).
    probs : array_like, shape (C,)
        The exact law; renormalized in float64.
    min_expected : float, optional
        Cells with expected count below this are pooled by a fixed rule that depends on
        ``probs`` and ``n`` only, never on the observed counts. Default 5.

    Returns
    -------
    GofResult
        ``statistic``, ``df`` (final cells - 1), ``pvalue``, ``n``, ``pooled`` (the
        merged cells), ``out_of_support`` (observations on cells of probability 0: fatal,
        statistic inf and p-value 0), ``observed``/``expected`` (final cells).

    Examples
    --------
    >>> import specconform
    >>> r = specconform.pearson_gof([48, 52], [0.5, 0.5])
    >>> (r.df, round(r.pvalue, 3))
    (1, 0.689)
    """
    return _gof.pearson_gof(observed, probs, min_expected=min_expected)


def pearson_homogeneity(counts_a, counts_b, *, min_expected: float = 5.0) -> HomogeneityResult:
    """Two-sample Pearson χ² homogeneity test over the same cells (a 2 x C table).

    Parameters
    ----------
    counts_a, counts_b : array_like, shape (C,)
        Integer counts of two independent samples (disjoint seeds).
    min_expected : float, optional
        Pooling threshold applied to the smaller sample's expected counts. Default 5.

    Returns
    -------
    HomogeneityResult
        ``statistic``, ``df``, ``pvalue``, ``n`` (= ``n_a + n_b``), ``pooled``.
        No continuity correction; columns seen in neither sample are dropped.
    """
    return _gof.pearson_homogeneity(counts_a, counts_b, min_expected=min_expected)


def rate_test(k: int, n: int, p0: float, *, min_expected: float = 5.0) -> RateResult:
    """Test that ``k`` of ``n`` independent trials are events of exact probability ``p0``.

    Used for the rejection rate at the first draft position, whose exact value is
    TV(p, q).

    Parameters
    ----------
    k, n : int
        Events and trials, ``0 <= k <= n``.
    p0 : float
        The exact event probability in [0, 1].

    Returns
    -------
    RateResult
        ``pvalue``: the exact two-sided binomial p-value (what the protocols decide
        on); ``chi2_statistic``/``chi2_df``/``chi2_pvalue``: the 2-cell Pearson χ²;
        ``statistic`` and ``rate``: the observed rate k / n.

    Examples
    --------
    >>> import specconform
    >>> specconform.rate_test(30, 100, 0.3).pvalue
    1.0
    """
    return _rate.rate_test(k, n, p0, min_expected=min_expected)


def sum_chi2(results) -> AggregateResult:
    """Aggregate χ² over independent strata: statistics and df summed, one p-value.

    Parameters
    ----------
    results : iterable of results with ``statistic`` and ``df``
        E.g. one :func:`pearson_gof` per stratum; results with df 0 add nothing.

    Returns
    -------
    AggregateResult
    """
    return _aggregate.sum_chi2(results)


def bonferroni(pvalues) -> BonferroniResult:
    """Bonferroni combination of possibly dependent p-values: ``min(1, m * min p_i)``.

    Valid under any dependence (groups that share seeds can share randomness).

    Parameters
    ----------
    pvalues : sequence of float

    Returns
    -------
    BonferroniResult
        ``pvalue``, ``m``, ``pvalues``, ``argmin`` (the deciding part; -1 when empty,
        with p-value 1).

    Examples
    --------
    >>> import specconform
    >>> specconform.bonferroni([0.2, 0.004]).pvalue
    0.008
    """
    return _aggregate.bonferroni(pvalues)


def joint_cells(p, q):
    """The exact joint law of (accepted?, committed token) at one draft position.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    numpy.ndarray, shape (2V,)
        ``min(p, q)`` (accepted, x) then ``(p - q)+`` (rejected, correction x); sums to 1.
    """
    return _speculative.joint_cells(p, q)


def total_variation(p, q) -> float:
    """Total variation distance ``0.5 * sum |p - q|`` between two laws of one vocabulary.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Laws (normalized in float64).

    Returns
    -------
    float
        In [0, 1]; the exact rejection probability at a draft position with laws p, q.

    Examples
    --------
    >>> import specconform
    >>> specconform.total_variation([0.5, 0.5], [1.0, 0.0])
    0.5
    """
    return _speculative.total_variation(p, q)


def detectable_tv(n: int, df: int, alpha: float, power: float = 0.8) -> float:
    """The smallest total variation every alternative law must have to be detected.

    For Pearson's χ² with ``df`` degrees of freedom and ``n`` samples, a law q at chi-square
    distance χ²(q‖p) from p gives, for large n, a noncentral χ² statistic with
    noncentrality λ = n·χ²(q‖p). By Cauchy-Schwarz χ²(q‖p) ≥ (2·TV)², so every q with
    ``TV(p, q) >= detectable_tv(...)`` has λ ≥ λ*, where λ* is the noncentrality at
    which the level-``alpha`` test has the given ``power`` (scipy.stats.ncx2). Laws
    closer than this may pass: a PASS says nothing about them.

    Parameters
    ----------
    n : int
        Sample size (> 0).
    df : int
        Degrees of freedom of the test (>= 1).
    alpha : float
        The test's level.
    power : float, optional
        Target power. Default 0.8.

    Returns
    -------
    float
        TV in [0, 1] (``inf`` when n or df is 0: no evidence at all).

    Examples
    --------
    >>> import specconform
    >>> round(specconform.detectable_tv(10_000, 1, 0.01), 4)
    0.0171
    """
    from scipy import optimize
    from scipy import stats as sps

    if n <= 0 or df <= 0:
        return math.inf
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("alpha and power must lie in (0, 1)")
    critical = sps.chi2.isf(alpha, df)

    def gap(lam: float) -> float:
        return float(sps.ncx2.sf(critical, df, lam)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
    lam = optimize.brentq(gap, 1e-9, hi, xtol=1e-10)
    return min(1.0, math.sqrt(lam / (4.0 * n)))
