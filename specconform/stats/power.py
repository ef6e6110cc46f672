"""Power, minimum sample size and minimum detectable discrepancy of specconform's tests.

Scipy style: each function returns a frozen result. Two families:

- **Pearson χ² tests** (goodness of fit, homogeneity, summed over strata). Under a fixed
  alternative the statistic is asymptotically noncentral χ² with the test's df and
  noncentrality λ = n · Σ (p_alt − p0)² / p0 (goodness of fit; for two samples of sizes
  n_a, n_b: λ = n_a n_b / (n_a + n_b) · Σ (a − b)² / m with m the pooled law). λ of
  independent strata add, like their statistics and df.
- **Rate tests**: the exact binomial test, two-sided by scipy's "minlike" rule
  (``binomtest``): its rejection region at α is computed exactly and its power summed
  from ``scipy.stats.binom``; no normal approximation.

A bound worth stating once (Cauchy–Schwarz): for any alternative on the same cells,
Σ (a − p0)² / p0 ≥ (Σ |a − p0|)² = 4 · TV(a, p0)². So λ ≥ 4 n TV², and the power at
λ = 4 n x² is a *lower bound* on the power against every alternative whose TV from p0
on the test's final cells is at least x (the least favourable mixture bias: mass moved
between two halves of equal probability, proportionally to p0). That is the
"detectable TV" the planner reports. Moves inside a pooled cell are invisible to the
test: TV on the final cells is at most the TV on tokens.

Numpy/scipy only, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

DEFAULT_POWER = 0.99


@dataclass(frozen=True)
class ChiSquarePower:
    """Power of a level-``alpha`` χ² test on ``df`` degrees of freedom at noncentrality
    ``noncentrality``: P(ncx2(df, λ) > chi2.ppf(1 − α, df)). ``critical`` is that quantile."""

    df: int
    noncentrality: float
    alpha: float
    critical: float
    power: float


@dataclass(frozen=True)
class SampleSize:
    """Smallest sample size ``n`` reaching ``power`` at level ``alpha``, and the
    noncentrality ``required`` it takes (``per_sample`` · n ≥ required). ``n`` is inf when
    the alternative has no effect on the tested cells (per-sample noncentrality 0)."""

    n: float
    df: int
    alpha: float
    power: float
    required: float
    per_sample: float


@dataclass(frozen=True)
class DetectableTV:
    """Smallest TV ``tv`` detected with ``power`` by a level-``alpha`` χ² test on ``df``
    from ``n`` samples (``n_effective`` for two samples); ``mixture`` is the mixing
    weight ε of ``(1 − ε) p0 + ε r`` at that TV when a direction r was given, else None
    (the least-favourable bound λ = 4 n TV²)."""

    tv: float
    df: int
    n_effective: float
    alpha: float
    power: float
    mixture: float | None


@dataclass(frozen=True)
class BinomialPower:
    """Exact power of the two-sided binomial test of rate ``p0`` at level ``alpha`` from
    ``n`` trials when the true rate is ``p_alt``. ``reject`` is the rejection region
    (counts k with p-value < alpha, the evaluator's 'fail' rule); ``size`` its exact
    probability under p0 (≤ alpha, the test is conservative at finite n)."""

    n: int
    p0: float
    p_alt: float
    alpha: float
    size: float
    power: float
    reject: tuple[int, ...]


def _check_alpha_power(alpha: float, power: float | None = None) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if power is not None and not alpha < power < 1.0:
        raise ValueError(f"power must lie in (alpha, 1), got {power}")


def chi2_power(df: int, noncentrality: float, alpha: float) -> ChiSquarePower:
    """Power of a level-``alpha`` Pearson χ² test with ``df`` degrees of freedom at ``λ``."""
    _check_alpha_power(alpha)
    df = int(df)
    if df < 1:
        raise ValueError(f"df must be >= 1 (a df-0 test has no evidence), got {df}")
    lam = float(noncentrality)
    if lam < 0 or math.isnan(lam):
        raise ValueError(f"noncentrality must be >= 0, got {noncentrality}")
    crit = float(sps.chi2.isf(alpha, df))
    if math.isinf(lam):
        pw = 1.0
    elif lam == 0:
        pw = float(alpha)  # ncx2 with λ = 0 is the central χ²
    else:
        pw = float(sps.ncx2.sf(crit, df, lam))
    return ChiSquarePower(df, lam, float(alpha), crit, pw)


def required_noncentrality(df: int, alpha: float, power: float = DEFAULT_POWER) -> float:
    """The λ at which a level-``alpha`` χ² test on ``df`` reaches ``power`` (root of a
    strictly increasing function of λ; at df 1, α 0.01, power 0.99: 24.03)."""
    _check_alpha_power(alpha, power)
    if int(df) < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    crit = sps.chi2.isf(alpha, df)
    hi = 1.0
    while sps.ncx2.sf(crit, df, hi) < power:
        hi *= 2.0
    return float(
        optimize.brentq(
            lambda lam: sps.ncx2.sf(crit, df, lam) - power, 0.0, hi, xtol=1e-10, rtol=1e-12
        )
    )


def gof_noncentrality(p0, p_alt, n: float = 1.0) -> float:
    """λ = n · Σ (p_alt − p0)² / p0 over the cells ``p0`` [C], ``p_alt`` [C] (float64,
    each normalised here). inf when p_alt puts mass where p0 has none: the test's
    out-of-support rule then fails it with probability 1 − (1 − mass)^n, see
    :func:`out_of_support_power`."""
    p0, alt = _law(p0, "p0"), _law(p_alt, "p_alt")
    if p0.shape != alt.shape:
        raise ValueError(f"p0 {p0.shape} and p_alt {alt.shape} differ in shape")
    zero = p0 == 0
    if np.any(alt[zero] > 0):
        return float("inf")
    return float(n * np.sum((alt[~zero] - p0[~zero]) ** 2 / p0[~zero]))


def homogeneity_noncentrality(law_a, law_b, n_a: float, n_b: float) -> float:
    """λ of the 2 x C Pearson homogeneity test: n_a n_b / (n_a + n_b) · Σ (a − b)² / m,
    m = (n_a a + n_b b) / (n_a + n_b) the pooled law; cells where m is 0 are empty."""
    a, b = _law(law_a, "law_a"), _law(law_b, "law_b")
    if a.shape != b.shape:
        raise ValueError(f"law_a {a.shape} and law_b {b.shape} differ in shape")
    n = n_a + n_b
    m = (n_a * a + n_b * b) / n
    keep = m > 0
    return float(n_a * n_b / n * np.sum((a[keep] - b[keep]) ** 2 / m[keep]))


def out_of_support_power(mass: float, n: int) -> float:
    """P(at least one of ``n`` samples lands on cells of reference probability 0) when the
    alternative puts ``mass`` there: such an observation fails the test outright."""
    return float(-np.expm1(n * np.log1p(-min(max(mass, 0.0), 1.0))) if mass < 1 else 1.0)


def min_sample_size(
    per_sample_noncentrality: float, df: int, alpha: float, power: float = DEFAULT_POWER
) -> SampleSize:
    """Smallest n with chi2_power(df, n · w, alpha) ≥ power, w the per-sample λ."""
    w = float(per_sample_noncentrality)
    req = required_noncentrality(df, alpha, power)
    if w < 0 or math.isnan(w):
        raise ValueError(f"per-sample noncentrality must be >= 0, got {w}")
    n = math.ceil(req / w) if w > 0 else float("inf")
    if math.isinf(w):
        n = 1
    return SampleSize(n, int(df), float(alpha), float(power), req, w)


def detectable_tv(
    n_effective: float, df: int, alpha: float, power: float = DEFAULT_POWER, *, p0=None, r=None
) -> DetectableTV:
    """Smallest TV a level-``alpha`` χ² test on ``df`` detects with ``power`` from
    ``n_effective`` samples (n for goodness of fit; n_a n_b / (n_a + n_b) for two samples;
    the sum over independent strata when each stratum is biased by the same TV).

    Without a direction: the least-favourable bound λ = 4 n TV² (every alternative at
    that TV or more is detected at least this well). With ``p0`` [C] and a direction
    ``r`` [C]: the mixture (1 − ε) p0 + ε r, whose TV is ε · TV(p0, r) and λ = n ε²
    χ²(r ‖ p0); the ε reaching ``power`` is returned too (it may exceed 1: not
    detectable by mixing toward r).
    """
    req = required_noncentrality(df, alpha, power)
    if n_effective <= 0:
        return DetectableTV(float("inf"), int(df), float(n_effective), alpha, power, None)
    if p0 is None:
        return DetectableTV(
            math.sqrt(req / (4.0 * n_effective)), int(df), float(n_effective), alpha, power, None
        )
    c = gof_noncentrality(p0, r, 1.0)
    tv_r = 0.5 * float(np.abs(_law(p0, "p0") - _law(r, "r")).sum())
    if c == 0:
        return DetectableTV(float("inf"), int(df), float(n_effective), alpha, power, None)
    eps = math.sqrt(req / (n_effective * c)) if math.isfinite(c) else 0.0
    return DetectableTV(eps * tv_r, int(df), float(n_effective), alpha, power, eps)


def mixture(p0, r, eps: float) -> np.ndarray:
    """(1 − eps) p0 + eps r ([C] float64): a sampler biased toward r with weight eps."""
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must lie in [0, 1], got {eps}")
    return (1.0 - eps) * _law(p0, "p0") + eps * _law(r, "r")


def binom_reject_region(n: int, p0: float, alpha: float) -> np.ndarray:
    """Counts k in 0..n whose two-sided exact binomial p-value (scipy's binomtest rule:
    the total probability of outcomes no more likely than k, with its relative
    tolerance 1e-7) is below ``alpha``. Returns a boolean mask [n + 1]."""
    _check_alpha_power(alpha)
    n = int(n)
    if n < 0 or not 0.0 <= p0 <= 1.0:
        raise ValueError(f"need n >= 0 and p0 in [0, 1], got n={n}, p0={p0}")
    k = np.arange(n + 1)
    pmf = sps.binom.pmf(k, n, p0)
    order = np.sort(pmf)
    cum = np.cumsum(order)
    # p-value(k) = Σ pmf[j] over pmf[j] <= pmf[k] * (1 + 1e-7), clipped at 1.
    idx = np.searchsorted(order, pmf * (1 + 1e-7), side="right")
    pval = np.minimum(1.0, np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0))
    return pval < alpha


def binom_power(n: int, p0: float, p_alt: float, alpha: float) -> BinomialPower:
    """Exact power of the two-sided binomial test of ``p0`` when the true rate is ``p_alt``."""
    if not 0.0 <= p_alt <= 1.0:
        raise ValueError(f"p_alt must lie in [0, 1], got {p_alt}")
    mask = binom_reject_region(n, p0, alpha)
    k = np.flatnonzero(mask)
    size = float(sps.binom.pmf(k, n, p0).sum())
    pw = float(sps.binom.pmf(k, n, p_alt).sum())
    return BinomialPower(
        int(n), float(p0), float(p_alt), float(alpha), size, pw, tuple(int(x) for x in k)
    )


def binom_detectable_shift(
    n: int, p0: float, alpha: float, power: float = DEFAULT_POWER
) -> tuple[float, float]:
    """Smallest rate shifts (down, up) from ``p0`` that the exact two-sided binomial test
    detects with ``power`` from ``n`` trials (nan where no rate in [0, 1] reaches it).
    The Bernoulli law's TV equals the shift."""
    _check_alpha_power(alpha, power)
    mask = binom_reject_region(n, p0, alpha)
    k = np.flatnonzero(mask)

    def pw(p):
        return float(sps.binom.pmf(k, n, p).sum()) - power

    out = []
    for end in (0.0, 1.0):
        if pw(end) < 0:
            out.append(float("nan"))
            continue
        root = optimize.brentq(pw, min(p0, end), max(p0, end), xtol=1e-12)
        out.append(abs(root - p0))
    return out[0], out[1]


def _law(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or np.any(a < 0) or not np.all(np.isfinite(a)) or a.sum() <= 0:
        raise ValueError(f"{name} must be a non-empty 1-d vector of finite weights >= 0")
    return a / a.sum()
