"""The top-p crossing token and the count test on it.

Vocabulary: under top-p, the kept tokens are the shortest prefix of the law sorted by
descending probability (ties in index order: a stable sort) whose mass reaches top_p;
the **crossing token** c is the last token of that prefix -- the kept token of smallest
probability, the highest index among equals. An engine that drops it (top-p off by one)
never commits c where it applies, while a correct one commits it with probability
p_t(c_t) at every step t.

``crossing_columns`` reduces the reference laws of one request to two columns per token:
p_t(c_t) (float64) and whether x_t = c_t. ``crossing_test``: with O = Σ hit_t and
E = Σ p_t(c_t), O − E is a martingale under H0 with predictable variance
V = Σ p_t(c_t)(1 − p_t(c_t)); z = (O − E) / sqrt(V) says the direction and size. The
p-value is two-sided from the Poisson-binomial law of O given the p_t(c_t)
(scipy.stats.poisson_binom): at the small expected counts of a CI protocol (E ~ 13-25)
the normal z² is liberal -- 1.8 % [0.9 %, 3.2 %] raw false fails at α = 0.01 over 1,000
null replications of ci_sequence, p-values' KS p 0.009 (docs/calibration.md) -- while
the discrete exact tail is conservative. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import poisson_binom


def crossing_tokens(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The crossing token of each law and its probability; -1 and NaN where the law
    keeps fewer than 2 tokens.

    p,        # [T, V] float64, each row a law (the request's top-p applied)
    returns   # ([T] int64 c_t or -1, [T] float64 p_t(c_t) or NaN)
    """
    p = np.asarray(p, dtype=np.float64)
    V = p.shape[1]
    masked = np.where(p > 0, p, np.inf)
    smallest = masked.min(axis=1)  # [T]
    # Highest index among the smallest kept probabilities: the last one in stable order.
    is_min = masked == smallest[:, None]
    crossing = V - 1 - np.argmax(is_min[:, ::-1], axis=1)
    applies = (p > 0).sum(axis=1) >= 2
    return np.where(applies, crossing, -1), np.where(applies, smallest, np.nan)


def crossing_columns(p: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p_t(c_t), 1.0 where x_t = c_t else 0.0), NaN where the law keeps < 2 tokens.

    p,        # [T, V] float64, each row a law (the request's top-p applied)
    tokens,   # [T] int64, the committed x_t
    returns   # ([T] float64, [T] float64)
    """
    crossing, cross_p = crossing_tokens(p)
    applies = crossing >= 0
    hit = np.where(applies, (np.asarray(tokens) == crossing).astype(np.float64), np.nan)
    return cross_p, hit


@dataclass(frozen=True)
class CrossingResult:
    """O, E and V over the tested tokens, z, z² and the two-sided Poisson-binomial p."""

    n: int
    observed: int
    expected: float
    variance: float
    z: float | None
    statistic: float | None
    pvalue: float | None


def crossing_test(cross_p: np.ndarray, hit: np.ndarray) -> CrossingResult:
    """cross_p, hit: [N] float64 over the tested tokens (no NaN)."""
    cross_p = np.asarray(cross_p, dtype=np.float64)
    hit = np.asarray(hit, dtype=np.float64)
    observed = int(hit.sum())
    expected = float(cross_p.sum())
    variance = float((cross_p * (1.0 - cross_p)).sum())
    if variance <= 0:
        return CrossingResult(int(cross_p.size), observed, expected, variance, None, None, None)
    z = (observed - expected) / np.sqrt(variance)
    law = poisson_binom(cross_p)
    tail = min(float(law.cdf(observed)), float(law.sf(observed - 1)))  # P(O* <= o), P(O* >= o)
    return CrossingResult(
        int(cross_p.size),
        observed,
        expected,
        variance,
        float(z),
        float(z * z),
        min(1.0, 2.0 * tail),
    )
