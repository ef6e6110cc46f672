"""The first accept decision of a round against the previous round's bonus token.

Vocabulary (specconform/adapters/engine.py): a round that accepts all its drafts ends
on the **bonus** token, drawn from p at the inverse CDF of one uniform; the next round
begins with the accept decision of its first draft, A = 1 iff coin · q(x) < p(x).

Under H0 (every random stream its own), given everything committed before that round,
A ~ Bernoulli(a) with a = 1 − TV(p, q) at the round's first position, whatever the
bonus was. So with any weight g fixed by the prefix,

    S = Σ g_i (A_i − a_i),   V = Σ g_i² a_i (1 − a_i)

is a martingale with predictable variance V, and z = S / √V → N(0, 1) (martingale CLT;
the weights are bounded, |g| ≤ 1/2). The weight is the bonus token's mid-PIT under its
reference law, g = F(b − 1) + p(b)/2 − 1/2: where the bonus's uniform is reused as the
next round's first coin (a stream laid out one uniform short), the coin lies in the
bonus's CDF cell [F(b − 1), F(b)), a low coin accepts more often, and S goes negative.
No V_t enters (the mid-point, not the randomized PIT), so the statistic is a function
of the run alone. Two-sided: z², 1 df. Calibration: docs/calibration.md ("Sequence
kind"). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2


@dataclass(frozen=True)
class BonusAcceptResult:
    """n pairs, S, V, accepted count and its expectation, z, z² and the two-sided p."""

    n: int
    sum_weighted: float
    variance: float
    accepted: int
    expected_accepted: float
    z: float | None
    statistic: float | None
    pvalue: float | None


def bonus_accept_test(
    weight: np.ndarray, accepted: np.ndarray, accept_prob: np.ndarray
) -> BonusAcceptResult:
    """weight [N] float64 (g_i), accepted [N] bool (A_i), accept_prob [N] float64 (a_i)."""
    g = np.asarray(weight, dtype=np.float64)
    a_obs = np.asarray(accepted, dtype=np.float64)
    a = np.clip(np.asarray(accept_prob, dtype=np.float64), 0.0, 1.0)
    s = float((g * (a_obs - a)).sum())
    v = float((g * g * a * (1.0 - a)).sum())
    n, hits, expected = int(g.size), int(a_obs.sum()), float(a.sum())
    if v <= 0.0:
        return BonusAcceptResult(n, s, v, hits, expected, None, None, None)
    z = s / np.sqrt(v)
    return BonusAcceptResult(
        n, s, v, hits, expected, float(z), float(z * z), float(chi2.sf(z * z, 1))
    )
