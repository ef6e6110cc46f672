"""Planning for the ``joint_score`` test (specconform.kinds.distribution.score): its
noncentrality against a planted bug's exact law, and the TV it detects along its
pre-registered directions. Numpy/scipy only.

Strata: every t1 row of the exact laws at its expected size N · p1(t1) (the test takes
every observed stratum, no min_samples), cells the world's union of supports.
"""

from __future__ import annotations

import math

import numpy as np

from specconform.calibration import World
from specconform.stats.mutant_laws import score_directions
from specconform.stats.score import score_noncentrality
from specconform.stats.speculative import joint_cells


def _stratum(w: World, i: int, d: int):
    """(p [C], q [C], null [2C], directions [K, 2C]) of t1 row i at depth d."""
    m = int((w.u_tokens[i] >= 0).sum())
    p, q = w.p2[i, :m], w.q2[d][i, :m]
    others = [w.q2[e][i, :m] for e in sorted(w.q2) if e != d]
    return p, q, joint_cells(p, q), score_directions(p, q, others)[1]


def _pad(x: np.ndarray, c: int) -> np.ndarray:
    """A [.., 2m] joint-cell array on m + 1 tokens (a zero cell after each half)."""
    m = x.shape[-1] // 2
    pad = [(0, 0)] * (x.ndim - 1) + [(0, c - m)]
    return np.concatenate([np.pad(x[..., :m], pad), np.pad(x[..., m:], pad)], axis=-1)


def score_mutant_noncentrality(w: World, n: float, d: int, law_of) -> tuple[float, int, float]:
    """(λ, df, P(an impossible observation)) of joint_score at n seeds against the bug
    whose first-position law at t1 row i is ``law_of(i)`` (a FirstPositionLaw)."""
    strata = []
    for i in range(w.t1_tokens.size):
        _, _, null, dirs = _stratum(w, i, d)
        alt = law_of(i).joint
        if alt.size != null.size:  # the bug's law has an outside cell
            c = alt.size // 2
            null, dirs = _pad(null, c), _pad(dirs, c)
        strata.append((n * float(w.p1[i]), null, dirs, alt))
    return score_noncentrality(strata)


def score_detectable_weight(w: World, n: float, d: int) -> tuple[float, int]:
    """(noncentrality per unit TV², df) along the least detectable direction: for the
    alternative null + x δ̂ (δ̂ a direction scaled to TV 1, in the span), λ = x² N Σ p1
    Σ δ̂² / null on the possible cells."""
    k, per = 0, None
    for i in range(w.t1_tokens.size):
        _, _, null, dirs = _stratum(w, i, d)
        keep = null > 0
        tv = 0.5 * np.abs(dirs).sum(axis=1)
        unit = np.where(tv[:, None] > 0, dirs / np.where(tv > 0, tv, 1)[:, None], 0.0)
        w_i = n * float(w.p1[i]) * np.sum(unit[:, keep] ** 2 / null[keep], axis=1)
        per = w_i if per is None else per + w_i
        k = dirs.shape[0]
    if per is None or not np.any(per > 0):
        return 0.0, 0
    return float(per[per > 0].min()), int(k)


def detectable_tv(weight: float, df: int, required: float) -> float:
    return math.sqrt(required / weight) if weight > 0 and df > 0 else math.inf
