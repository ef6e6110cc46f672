"""Exact laws of speculative sampling at one draft position (numpy only).

With target law p and draft law q over the same cells, a draft x ~ q is accepted
with probability min(1, p(x)/q(x)); on rejection the correction is drawn from
(p - q)₊ / TV(p, q). Hence, exactly:

- P(reject) = 1 - Σ min(p, q) = TV(p, q) = ½ Σ |p - q|;
- P(accept, x) = min(p, q)(x) and P(reject, x) = (p - q)₊(x) — the 2V "joint" cells,
  which sum to Σ p = 1 and whose marginal over accept/reject is p itself.
"""

from __future__ import annotations

import numpy as np


def total_variation(p, q) -> float:
    """TV(p, q) = ½ Σ |p - q| of two laws over the same cells ([C] each), in float64.

    Both laws are renormalized first (they sum to 1 only up to float32 rounding).
    """
    p, q = _law(p), _law(q)
    return float(0.5 * np.abs(p - q).sum())


def joint_cells(p, q) -> np.ndarray:
    """[2C] probabilities: min(p, q) (accepted, x) then (p - q)₊ (rejected, x)."""
    p, q = _law(p), _law(q)
    return np.concatenate([np.minimum(p, q), np.maximum(p - q, 0.0)])


def _law(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    s = x.sum()
    if x.ndim != 1 or s <= 0 or np.any(x < 0) or not np.all(np.isfinite(x)):
        raise ValueError("a law must be a finite, non-negative [C] vector with positive mass")
    return x / s
