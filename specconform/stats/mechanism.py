"""The conditional laws of a drafted token given the accept/reject decision, and the
mechanism PIT columns of raw/sequence/tokens.csv (docs/sequence.md, "mechanism_pit").

At a drafted position j with target law p and draft law q (TV = TV(p, q)), the exact
speculative rule draws x ~ q and accepts it with probability min(1, p(x) / q(x)); on a
rejection it draws the correction from the residual. So, given the past:

- the draft is accepted with probability 1 - TV, and then the committed token has law
  ``a = min(p, q) / (1 - TV)``;
- it is rejected with probability TV, and then the correction has law
  ``r = (p - q)+ / TV``.

The decision (accepted or correction) is known before the committed token is drawn in
this decomposition -- (decision, token) has the same joint law whether one draws the
draft first or the decision first -- so the randomized PIT of a correction under r, and
of an accepted draft under a, is Uniform(0, 1) given the past and the decision. Their
mixture (1 - TV) a + TV r is p: a wrong residual or a wrong accept law moves the
committed law p only by its share of the tokens, while it moves a or r fully.

Zeros. ``a(x) = 0`` means p(x) = 0 or q(x) = 0: exact zeros of a filtered (top-k,
top-p) or underflowed law, which rounding does not create -- an accepted draft there is
impossible (mechanism out of support, fatal). ``r(x) = 0`` means p(x) <= q(x), a
comparison of two numbers that carry rounding: the reference law is a replay
(teacher-forced or serial forward) whose float32 p and q differ from the engine's own by
rounding of the reduction order -- measured up to 2.7e-6 absolute (teacher forcing,
docs/sequence-runner.md), i.e. relative differences of order 1e-5 at the tokens that
carry the mass. A correction at x is therefore *out of support* only when the reference
puts clearly more draft than target mass there, q(x) - p(x) > RESIDUAL_ZERO_RTOL * q(x)
(RESIDUAL_ZERO_RTOL = 1e-4: ten times that discrepancy, 1,700 float32 ulps, far below
what a residual bug moves: under one the correction comes from a law that puts mass
where q > p by O(1) relative). Within the tolerance, 0 < q(x) - p(x) <= 1e-4 q(x)
(or p(x) == q(x) > 0), the token is a *boundary* case: not fatal, and left out of the
PIT (the columns stay empty), since r gives it no interval to randomize over.
"""

from __future__ import annotations

import numpy as np

RESIDUAL_ZERO_RTOL = 1e-4  # relative to q(x); see the module docstring


def residual_law(p, q) -> np.ndarray:
    """r = (p - q)+ / sum (p - q)+ per row; a row with no residual mass (p == q) stays 0.

    p,  # [N, V] float64, target laws (rows sum to 1)
    q,  # [N, V] float64, draft laws (rows sum to 1)
    """
    return _normalize_rows(np.maximum(np.asarray(p, np.float64) - np.asarray(q, np.float64), 0.0))


def accepted_law(p, q) -> np.ndarray:
    """a = min(p, q) / sum min(p, q) per row; a row with no overlap (TV 1) stays 0.

    p,  # [N, V] float64
    q,  # [N, V] float64
    """
    return _normalize_rows(np.minimum(np.asarray(p, np.float64), np.asarray(q, np.float64)))


def mechanism_columns(p, q, token, corrected) -> tuple[np.ndarray, np.ndarray]:
    """(mech_cdf_below, mech_p_token) of drafted tokens: F(x - 1) and f(x) under r for a
    correction, under a for an accepted draft; NaN for both at a boundary correction
    (module docstring). ``mech_p_token == 0`` is a mechanism-out-of-support token.

    p,          # [N, V] float64, the reference target law at each token's prefix
    q,          # [N, V] float64, the reference draft law at the same prefix
    token,      # [N] int64, the committed token x
    corrected,  # [N] bool, True: kind correction, False: kind accepted
    """
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    x = np.atleast_1d(np.asarray(token, dtype=np.int64))
    fix = np.atleast_1d(np.asarray(corrected, dtype=bool))
    if p.shape != q.shape or p.shape[0] != x.size or x.size != fix.size:
        raise ValueError(f"shapes differ: p {p.shape}, q {q.shape}, token {x.shape}, {fix.shape}")
    # One unnormalized mass per row, (p - q)+ or min(p, q), then one normalization (the
    # same numbers as residual_law / accepted_law, at half the work).
    law = _normalize_rows(np.where(fix[:, None], np.maximum(p - q, 0.0), np.minimum(p, q)))
    rows = np.arange(x.size)
    f = law[rows, x]
    cdf_below = np.clip(np.cumsum(law, axis=1)[rows, x] - f, 0.0, 1.0)
    px, qx = p[rows, x], q[rows, x]
    boundary = fix & (f == 0) & (px > 0) & (qx - px <= RESIDUAL_ZERO_RTOL * qx)
    f = np.where(boundary, np.nan, f)
    cdf_below = np.where(boundary, np.nan, np.where(f == 0, 0.0, cdf_below))
    return cdf_below, f


def _normalize_rows(mass: np.ndarray) -> np.ndarray:
    total = mass.sum(axis=1, keepdims=True)
    return np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)
