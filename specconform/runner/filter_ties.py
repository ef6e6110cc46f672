"""Filter-boundary near-ties of a law comparison (issue 32, part 1).

A ``trace`` or ``teacher_forcing`` check compares the law the engine used with the serial
reference's. Under top-k or top-p the two laws' supports can differ on a correct engine:
the filter keeps a token when its logit reaches the k-th largest, or when the mass ranked
above it is still below top_p, and both sides of that comparison carry the numerics
model's error. Seen on the lab's GPU host (its CPU, torch 2.11): trace_grid, top-p 0.8,
the reference kept two tokens and the engine one (the top token's mass a hair from 0.8),
so the renormalised laws differed by 0.13 and a correct run FAILed.

A support difference is a **near-tie** when every token kept by one law and not the
other sits within the model's error of a filter threshold, judged on the reference's
unfiltered law u (softmax of the scaled logits, no filter; module
specconform.stats.numerics for the bounds):

- top-k (0 < k < V): |log u_t - log u_(k)| <= 2 delta, u_(k) the k-th largest (each
  logit moves by at most delta, and so does the k-th largest one);
- top-p (top_p < 1): the mass ranked above t within the top-k set can be anything
  between the tokens surely above it (log-probability more than 2 delta higher) and those
  possibly above it (within 2 delta, which may swap order with t), each mass moved by at
  most law_bound; t's decision can flip iff top_p lies in that range.

And the two laws restricted to their common support and renormalised must still agree
within the check's tolerance. Anything else stays a mismatch. Near-ties are counted
apart, never excused: the evaluator bounds their count (kinds/sequence/numerics.py).

The same tests, as a **margin** (the distance from flipping in units of the error; <= 1
a near-tie), judge a committed token of reference probability 0 (tokens.csv
filter_margin, read by out_of_support): :func:`token_margins` for every token's own
decision at once (greedy is top-k 1), :func:`law_margin` for any decision of a law (a
mechanism zero: the conditional law moves with the supports of p and q).

Numbers only (numpy): the runner passes the laws in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FilterParams:
    """One request's filters (top_k 0: off; top_p 1: off) and a thunk for the reference's
    unfiltered law at its temperature ([V] float64), computed only when needed."""

    top_k: int
    top_p: float
    unfiltered: Callable[[], np.ndarray]

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0


@dataclass(frozen=True)
class SupportTie:
    """How a support difference was judged."""

    near_tie: bool
    tokens: tuple[int, ...]  # kept by exactly one of the two laws
    common_diff: float  # max |dp| of the laws restricted to the common support
    why: str  # when not a near-tie: the first token outside the error, or the diff

    def to_json(self) -> dict:
        return {"filter_tokens": list(self.tokens), "common_max_abs_diff": self.common_diff}


def _log(u: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(u)


def token_margins(
    unfiltered: np.ndarray, top_k: int, top_p: float, *, logit_bound: float, law_bound: float
) -> np.ndarray:
    """[V] float64: how far each token's keep-or-drop decision under the filters lies from
    flipping, in units of the numerics model's error (<= 1: a near-tie, the decision can
    flip on a correct engine; inf: no filter decides it). ``unfiltered``: the reference's
    law at the request's temperature with no filter, [V]. Greedy is top-k 1. One sort and
    two searches for the whole vocabulary.

    - top-k: |log u_t - log u_b| in units of 2 logit bounds (each logit moves by at most
      one), b the (k+1)-th largest for a kept token (it would have to overtake it), the
      k-th for a dropped one;
    - top-p (tokens of the top-k set only): how far top_p lies from the masses that can
      rank above t, from those surely above it (log-probability more than 2 logit bounds
      higher) to those possibly above it (within 2 logit bounds, which may swap with t),
      renormalised on the top-k set, in law bounds."""
    u = np.asarray(unfiltered, np.float64)
    log_u = _log(u)
    margins = np.full(u.size, math.inf)
    kept_k = np.ones(u.size, bool)  # the reference's top-k set (ties at the k-th kept)
    if 0 < top_k < u.size:
        ranked = np.sort(log_u)[::-1]
        kept_k = log_u >= ranked[top_k - 1]
        other = np.where(kept_k, ranked[top_k], ranked[top_k - 1])
        with np.errstate(invalid="ignore"):
            margins = _scaled(np.abs(log_u - other), 2.0 * logit_bound)
    if top_p < 1.0:
        at, kept_u = log_u[kept_k], u[kept_k]
        order = np.argsort(at, kind="stable")
        ascending = at[order]
        below = np.concatenate([[0.0], np.cumsum(kept_u[order])])  # mass of the i smallest
        z = below[-1]
        surely = z - below[np.searchsorted(ascending, at + 2.0 * logit_bound, side="right")]
        possibly = z - below[np.searchsorted(ascending, at - 2.0 * logit_bound, side="left")]
        possibly -= kept_u  # the token itself is not above itself
        gap = np.maximum(0.0, np.maximum(surely / z - top_p, top_p - possibly / z))
        margins[kept_k] = np.minimum(margins[kept_k], _scaled(gap, law_bound))
    return margins


def _scaled(distance: np.ndarray, bound: float) -> np.ndarray:
    """distance / bound, the margin's unit (<= 1: inside the error); a zero bound makes
    only a zero distance a tie; a non-finite distance is inf."""
    distance = np.asarray(distance, np.float64)
    finite = np.isfinite(distance)
    if bound <= 0.0:
        out = np.where(distance <= 0.0, 0.0, math.inf)
    else:
        out = distance / bound
    return np.where(finite, out, math.inf)


def token_margin(
    unfiltered: np.ndarray,
    token: int,
    top_k: int,
    top_p: float,
    *,
    logit_bound: float,
    law_bound: float,
) -> float:
    """One token's entry of :func:`token_margins`."""
    bounds = {"logit_bound": logit_bound, "law_bound": law_bound}
    return float(token_margins(unfiltered, top_k, top_p, **bounds)[token])


def residual_explained(
    laws: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    near_p: np.ndarray,
    near_q: np.ndarray,
    token: int,
    *,
    law_bound: float,
    relative: float = 1e-4,
) -> bool:
    """Whether filter near-ties can put ``token`` in an engine's residual (p' - q')+
    where the reference's filtered laws have q - p > relative q (a mechanism zero).
    ``laws``: (p, q) filtered and (u_p, u_q) unfiltered, each [V]. An engine's q' may
    drop the token (near in q's law); otherwise its p' may drop p's near kept tokens,
    renormalising the token up to at most u_p(x) / (Z_p - D), and its q' may keep q's
    near dropped tokens, down to at least u_q(x) / (Z_q + A) (Z: the reference's kept
    mass of u; D, A: the near tokens' u mass), each law moving by law_bound besides."""
    p, q, u_p, u_q = (np.asarray(a, np.float64) for a in laws)
    x = token
    if near_q[x] and q[x] > 0:
        return True
    kept_p, kept_q = p > 0, q > 0
    z_p, z_q = float(u_p[kept_p].sum()), float(u_q[kept_q].sum())
    others = np.ones(p.size, bool)
    others[x] = False
    d = float(u_p[near_p & kept_p & others].sum())
    a = float(u_q[near_q & ~kept_q].sum())
    p_hi = float(u_p[x]) / max(z_p - d, 1e-300)
    q_lo = float(u_q[x]) / (z_q + a)
    return q_lo - p_hi <= relative * q_lo + 2.0 * law_bound


def law_margin(
    unfiltered: np.ndarray, top_k: int, top_p: float, *, logit_bound: float, law_bound: float
) -> float:
    """The smallest margin of any filter decision of the law (:func:`token_margins`; its
    top-k part is smallest at the k-th / (k+1)-th pair): <= 1 when the engine's filtered
    law may keep another support than the reference's, and so renormalise every kept
    token differently."""
    bounds = {"logit_bound": logit_bound, "law_bound": law_bound}
    return float(np.min(token_margins(unfiltered, top_k, top_p, **bounds), initial=math.inf))


def classify_support(
    reference: np.ndarray,
    engine: np.ndarray,
    params: FilterParams,
    *,
    logit_bound: float,
    law_bound: float,
    tolerance: float,
) -> SupportTie:
    """reference, engine: [V] filtered laws whose supports differ."""
    a = np.asarray(reference, np.float64)
    b = np.asarray(engine, np.float64)
    tokens = tuple(int(t) for t in np.flatnonzero((a > 0) != (b > 0)))
    common = (a > 0) & (b > 0)
    if not common.any():
        return SupportTie(False, tokens, 1.0, "no token in both supports")
    ra, rb = a[common] / a[common].sum(), b[common] / b[common].sum()
    diff = float(np.max(np.abs(ra - rb)))
    u = np.asarray(params.unfiltered(), np.float64)
    bounds = {"logit_bound": logit_bound, "law_bound": law_bound}
    margins = token_margins(u, params.top_k, params.top_p, **bounds)
    for t in tokens:
        if margins[t] > 1.0:
            return SupportTie(False, tokens, diff, f"token {t} is outside the filters' error")
    if diff > tolerance:
        return SupportTie(False, tokens, diff, f"common support differs by {diff:.3g}")
    return SupportTie(True, tokens, diff, "")
