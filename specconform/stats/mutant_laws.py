"""Exact first-position laws of planted bugs, derived from p and q (numpy only).

At the first draft position a correct sampler draws x ~ q, accepts iff u·q(x) < p(x)
(probability min(1, p(x)/q(x))) and otherwise draws the correction from (p − q)₊ by
inverse CDF (token order) with a fresh uniform. Each planted bug changes one piece; the
laws below are what the bug commits, as exact vectors over the same cells as p and q:

- ``accepted`` [C]: P(accept, x); ``rejected`` [C]: P(reject, correction = x); the
  committed t2 law is their sum and the rejection rate is ``rejected.sum()``.

Bugs (engine-free names of specconform.calibration.MUTANTS and the bundled engine's):
``residual_from_p`` (correction from p), ``greedy_draft`` (x = argmax q scored with
softmax q), ``q_one_hot`` / engine ``no_draft_probs`` (q one-hot at the draft),
``draft_q_mismatch`` (scored with another depth's q), ``target_temperature`` (p at
T = 0.8 for the accept rule and the residual), ``shared_uniform`` (the correction reuses
the accept coin, so it is drawn from the residual's CDF restricted to u ≥ p(x)/q(x)),
``bf16_q`` (q rounded to bfloat16 in the accept rule and the residual).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXACT = (
    "residual_from_p",
    "greedy_draft",
    "q_one_hot",
    "draft_q_mismatch",
    "target_temperature",
    "shared_uniform",
    "bf16_q",
)


@dataclass(frozen=True)
class FirstPositionLaw:
    accepted: np.ndarray  # [C] float64: P(accept, t2 = x)
    rejected: np.ndarray  # [C] float64: P(reject, t2 = x)

    @property
    def committed(self) -> np.ndarray:
        return self.accepted + self.rejected

    @property
    def joint(self) -> np.ndarray:
        """[2C]: accepted cells then rejected cells (the joint test's layout)."""
        return np.concatenate([self.accepted, self.rejected])

    @property
    def reject_rate(self) -> float:
        return float(self.rejected.sum())


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round to nearest even), returned as float64."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def _residual(p: np.ndarray, q_score: np.ndarray) -> np.ndarray:
    r = np.maximum(p - q_score, 0.0)
    return r / r.sum() if r.sum() > 0 else p  # p == q: never used (rejection rate 0)


def _scored(p, q, q_score) -> FirstPositionLaw:
    """x ~ q accepted iff u·q_score(x) < p(x); correction from (p − q_score)₊."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q_score > 0, np.minimum(1.0, p / q_score), (p > 0).astype(float))
    acc = q * ratio
    return FirstPositionLaw(acc, (1.0 - acc.sum()) * _residual(p, q_score))


def first_position_law(p, q, mutant: str | None = None, *, q_other=None) -> FirstPositionLaw:
    """What a sampler with ``mutant`` (None: correct) commits at the first draft position.

    p [C], q [C]: the exact target and draft laws (renormalised here); q_other [C]: the
    other depth's draft law (``draft_q_mismatch`` only).
    """
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    if mutant is None:
        return FirstPositionLaw(np.minimum(p, q), np.maximum(p - q, 0.0))
    if mutant == "residual_from_p":
        acc = np.minimum(p, q)
        return FirstPositionLaw(acc, (1.0 - acc.sum()) * p)
    if mutant == "greedy_draft":
        a = int(np.argmax(q))
        point = np.zeros_like(q)
        point[a] = 1.0
        return _scored(p, point, q)
    if mutant in ("q_one_hot", "no_draft_probs"):
        acc = q * p  # q_score(x) = 1: accept iff u < p(x)
        # From x: rejection 1 - p(x), correction p restricted to y != x over 1 - p(x);
        # summed over x != y with weight q(x): p(y) (1 - q(y)).
        return FirstPositionLaw(acc, p * (1.0 - q))
    if mutant == "draft_q_mismatch":
        if q_other is None:
            raise ValueError("draft_q_mismatch needs q_other")
        q2 = np.asarray(q_other, dtype=np.float64) / np.sum(q_other)
        return _scored(p, q, q2)
    if mutant == "target_temperature":
        pt = np.where(p > 0, p ** (1 / 0.8), 0.0)
        pt /= pt.sum()
        return FirstPositionLaw(np.minimum(pt, q), np.maximum(pt - q, 0.0))
    if mutant == "shared_uniform":
        return FirstPositionLaw(np.minimum(p, q), _shared_uniform_rejected(p, q))
    if mutant == "bf16_q":
        return _scored(p, q, bf16(q.astype(np.float32)))
    raise ValueError(f"no exact law for mutant {mutant!r}; exact: {', '.join(EXACT)}")


def _shared_uniform_rejected(p, q) -> np.ndarray:
    """P(reject, y) when the correction is the residual's inverse CDF at the accept coin
    u, given u·q(x) >= p(x), i.e. u uniform on [p(x)/q(x), 1) for x ~ q."""
    res = _residual(p, q)
    hi = np.cumsum(res)
    lo = hi - res
    out = np.zeros_like(p)
    for x in np.flatnonzero(q > p):
        a = p[x] / q[x]
        # length of [a, 1) ∩ [lo_y, hi_y) for every y, times the density q(x) of x
        out += q[x] * np.clip(np.minimum(hi, 1.0) - np.maximum(lo, a), 0.0, None)
    return out
