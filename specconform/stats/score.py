"""A score test along pre-registered directions, with a Monte Carlo p-value under the
exact null (numpy only).

Strata s have multinomial counts O_s [C] with null law π_s [C] and K directions
δ_s [K, C] (an alternative law minus the null: how a named bug class moves the cells).
The score of the family π_s + Σ_k θ_k δ_sk at θ = 0 is

    S = Σ_s Σ_c (O_sc − n_s π_sc) δ_sc / π_sc            [K]

with covariance V = Σ_s n_s (Σ_c δ_sc δ_sc' / π_sc − (Σ_c δ_sc)(Σ_c δ_sc')ᵀ) under the
null; the statistic is T = Sᵀ V⁺ S, asymptotically χ² with df = rank V, noncentral with
λ = μᵀ V⁺ μ under an alternative whose mean score is μ. For an alternative in the span
of the directions λ is the full χ² divergence N Σ_s p_s χ²(alt ‖ null): the most powerful
test's noncentrality at a few df instead of the omnibus test's many.

The p-value is Monte Carlo: T recomputed on ``replications`` draws of every stratum's
counts from its null law (the observed stratum sizes fixed), p = (1 + #{T* ≥ T}) / (1 +
R), valid at any sample size when the R draws are fresh for each data set (a fixed
sample would make the size that sample's own tail quantile): the caller seeds the
generator from the data (specconform.kinds.distribution.score), so a verifier recomputes
the same p-value. An observation in a cell of null probability 0 is
impossible: statistic inf, p-value 0 (as :func:`specconform.stats.gof.pearson_gof`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

DEFAULT_REPLICATIONS = 1999  # smallest p-value 1/2000, below the 0.001 of a Holm first step


def replications_for(level: float, family_size: int) -> int:
    """Monte Carlo draws for a test in a family adjusted at ``level`` over ``family_size``
    tests: the smallest p-value 1/(R + 1) at most half of Holm's first-step level/m, so
    that the p-value's resolution alone never keeps a test from rejecting (at
    DEFAULT_REPLICATIONS and level/m = 0.001 it is exactly half; a family at 0.005 over
    10 tests needs 3,999). Never fewer than DEFAULT_REPLICATIONS, which every file before
    the numerics reserve used (their p-values, and so their archives, are unchanged)."""
    need = math.ceil(round(2 * family_size / level, 6)) - 1
    return max(DEFAULT_REPLICATIONS, need)


@dataclass(frozen=True)
class ScoreResult:
    statistic: float  # T = Sᵀ V⁺ S (inf with an impossible observation)
    df: int  # rank of V (0: the directions do not move any possible cell)
    pvalue: float  # Monte Carlo p-value (nan when df = 0: no evidence)
    n: int
    out_of_support: int  # observations in cells of null probability 0
    asymptotic_pvalue: float  # χ²_df survival of T (reported beside, never decides)
    replications: int
    score: tuple[float, ...]  # S [K]


@dataclass(frozen=True)
class ScoreStratum:
    counts: np.ndarray  # [C] int64 observed
    null: np.ndarray  # [C] float64 null law (sums to 1)
    directions: np.ndarray  # [K, C] float64 alternative minus null


def _weights(s: ScoreStratum) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keep [C] bool, a [K, C'] = δ / π on the possible cells, π on them)."""
    keep = s.null > 0
    pi = s.null[keep]
    return keep, s.directions[:, keep] / pi, pi


def score_moments(strata: list[ScoreStratum]) -> tuple[np.ndarray, np.ndarray]:
    """(S [K], V [K, K]) of the observed counts."""
    k = strata[0].directions.shape[0] if strata else 0
    score, cov = np.zeros(k), np.zeros((k, k))
    for s in strata:
        keep, a, pi = _weights(s)
        n = float(s.counts.sum())
        score += a @ (s.counts[keep] - n * pi)
        m = a @ pi
        cov += n * ((a * pi) @ a.T - np.outer(m, m))
    return score, cov


def _quadratic(score: np.ndarray, cov_pinv: np.ndarray) -> np.ndarray:
    """Sᵀ V⁺ S for S [..., K]."""
    return np.einsum("...i,ij,...j->...", score, cov_pinv, score)


def score_test(
    strata: list[ScoreStratum],
    *,
    replications: int = DEFAULT_REPLICATIONS,
    seed: int | list[int] = 0,
) -> ScoreResult:
    """The score test of the module docstring on ``strata``."""
    n = int(sum(int(s.counts.sum()) for s in strata))
    oos = int(sum(int(s.counts[s.null <= 0].sum()) for s in strata))
    score, cov = score_moments(strata)
    df = int(np.linalg.matrix_rank(cov, tol=1e-9 * max(1.0, float(np.abs(cov).max(initial=0)))))
    if oos:
        return ScoreResult(math.inf, max(df, 1), 0.0, n, oos, 0.0, 0, tuple(score))
    if df == 0:
        return ScoreResult(0.0, 0, float("nan"), n, 0, float("nan"), 0, tuple(score))
    pinv = np.linalg.pinv(cov, rcond=1e-9, hermitian=True)
    t = float(_quadratic(score, pinv))
    rng = np.random.default_rng(seed)
    sims = np.zeros((replications, score.size))
    for s in strata:
        keep, a, pi = _weights(s)
        size = int(s.counts.sum())
        if size == 0:
            continue
        draws = rng.multinomial(size, pi / pi.sum(), size=replications)  # [R, C']
        sims += (draws - size * pi) @ a.T
    t_sim = _quadratic(sims, pinv)
    # Ties within rounding count as exceedances (conservative).
    exceed = int(np.sum(t_sim >= t * (1 - 1e-12)))
    p_mc = (1 + exceed) / (1 + replications)
    return ScoreResult(t, df, p_mc, n, 0, float(sps.chi2.sf(t, df)), replications, tuple(score))


def score_noncentrality(
    strata_alt: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[float, int, float]:
    """(λ, df, P(some impossible observation)) of the score test against an alternative:
    per stratum (n_s, null [C], directions [K, C], alternative law [C]). λ = μᵀ V⁺ μ with
    μ = Σ n_s Σ_c (alt − null) δ / π (the variance change under the alternative is
    neglected: the usual local approximation, checked by replications in
    docs/kill-matrix.md)."""
    strata = []
    mu = None
    log_clean = 0.0
    for n_s, null, dirs, alt in strata_alt:
        s = ScoreStratum(np.zeros(null.size, dtype=np.int64), null, dirs)
        strata.append((n_s, s))
        keep, a, _ = _weights(s)
        m = n_s * (a @ (alt[keep] - null[keep]))
        mu = m if mu is None else mu + m
        bad = float(alt[~keep].sum())
        log_clean += n_s * np.log1p(-min(bad, 1 - 1e-300))
    if mu is None:
        return 0.0, 0, 0.0
    k = mu.size
    cov = np.zeros((k, k))
    for n_s, s in strata:
        keep, a, pi = _weights(s)
        m = a @ pi
        cov += n_s * ((a * pi) @ a.T - np.outer(m, m))
    df = int(np.linalg.matrix_rank(cov, tol=1e-9 * max(1.0, float(np.abs(cov).max(initial=0)))))
    lam = float(_quadratic(mu, np.linalg.pinv(cov, rcond=1e-9, hermitian=True))) if df else 0.0
    return lam, df, float(-np.expm1(log_clean))
