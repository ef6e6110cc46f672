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

Numbers only (numpy): the runner passes the laws in.
"""

from __future__ import annotations

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


def _top_k_near(log_u: np.ndarray, t: int, k: int, logit_bound: float) -> bool:
    if not 0 < k < log_u.size:
        return False
    kth = np.sort(log_u)[::-1][k - 1]
    return abs(float(log_u[t] - kth)) <= 2.0 * logit_bound


def _top_p_near(
    u: np.ndarray, log_u: np.ndarray, kept_k: np.ndarray, t: int, top_p: float, model: tuple
) -> bool:
    logit_bound, law_bound = model
    if not top_p < 1.0:
        return False
    z = float(u[kept_k].sum())
    others = kept_k.copy()
    others[t] = False
    surely = others & (log_u > log_u[t] + 2.0 * logit_bound)
    possibly = others & (log_u >= log_u[t] - 2.0 * logit_bound)
    lo = float(u[surely].sum()) / z - law_bound
    hi = float(u[possibly].sum()) / z + law_bound
    return lo <= top_p <= hi


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
    with np.errstate(divide="ignore"):
        log_u = np.log(u)
    kept_k = np.ones(u.size, bool)  # the reference's top-k set (ties at the k-th kept)
    if 0 < params.top_k < u.size:
        kept_k = log_u >= np.sort(log_u)[::-1][params.top_k - 1]
    for t in tokens:
        if not (
            _top_k_near(log_u, t, params.top_k, logit_bound)
            or (
                kept_k[t]
                and _top_p_near(u, log_u, kept_k, t, params.top_p, (logit_bound, law_bound))
            )
        ):
            return SupportTie(False, tokens, diff, f"token {t} is outside the filters' error")
    if diff > tolerance:
        return SupportTie(False, tokens, diff, f"common support differs by {diff:.3g}")
    return SupportTie(True, tokens, diff, "")
