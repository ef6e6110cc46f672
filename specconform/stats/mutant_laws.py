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

The bundled engine's engine-only bugs (engine_under_test.runners.mutant_hooks), where the
round after t1 drafts one token (max_tokens 3: t1 from prefill, then draft_len 1):
``target_default_params`` (accept rule and residual use P, the unfiltered softmax of the
target logits: needs ``p_raw`` [C + 1], its mass on the cells plus the mass outside them
in a last cell, where p is 0: a correction there is out of support),
``draft_raw_q`` (drafts from the filtered q, scored with Q, the unfiltered draft softmax
on the cells: needs ``q_raw`` [C], not renormalised), ``residual_inplace`` (q is zeroed
except at the draft before the residual is formed: after rejecting x the correction is
p restricted to y != x). ``bonus_params`` and ``async_stale_input`` leave the first
position exact and act on t3 (:func:`t3_out_of_support`); ``shared_rng`` leaves every
row's law exact and makes the rows of a batch share one uniform block, so a batch commits
one sequence (:func:`one_sequence_statistic`).
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
    "target_default_params",
    "draft_raw_q",
    "residual_inplace",
)
# The first-position law is the correct one; the bug acts elsewhere (t3, or the
# dependence between rows).
FIRST_POSITION_EXACT = ("bonus_params", "async_stale_input", "shared_rng")
# The bundled engine's runners where each engine bug acts (kernel and engine-free bugs:
# every speculative group). nospec draws t2 straight from p in every case but shared_rng.
ACTS_ON = {
    "async_stale_input": ("async",),  # the async runner's device-side next input only
    "shared_rng": ("nospec", "sync", "async"),
}


def affects(mutant: str, mode: str) -> bool:
    """Whether ``mutant`` changes what a group of ``mode`` commits."""
    return mode in ACTS_ON.get(mutant, ("sync", "async"))


# Bugs whose law needs the unfiltered softmax (the reference's ``raw`` block).
NEEDS_RAW = {"target_default_params": "p_raw", "draft_raw_q": "q_raw"}


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


def first_position_law(
    p, q, mutant: str | None = None, *, q_other=None, p_raw=None, q_raw=None
) -> FirstPositionLaw:
    """What a sampler with ``mutant`` (None: correct) commits at the first draft position.

    p [C], q [C]: the exact target and draft laws (renormalised here); q_other [C]: the
    other depth's draft law (``draft_q_mismatch`` only); p_raw [C + 1] and q_raw [C]: the
    unfiltered softmaxes (module docstring; ``target_default_params`` returns C + 1
    cells, the last one outside every filtered support).
    """
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    if mutant is None or mutant in FIRST_POSITION_EXACT:
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
    if mutant in NEEDS_RAW and (p_raw if mutant == "target_default_params" else q_raw) is None:
        raise ValueError(f"{mutant} needs {NEEDS_RAW[mutant]} (the reference's raw laws)")
    if mutant == "target_default_params":
        big_p = np.asarray(p_raw, dtype=np.float64)
        if big_p.size != p.size + 1:
            raise ValueError("p_raw needs one cell more than p (the mass outside the cells)")
        q_pad = np.append(q, 0.0)
        return _scored(big_p, q_pad, q_pad)
    if mutant == "draft_raw_q":
        return _scored(p, q, np.asarray(q_raw, dtype=np.float64))
    if mutant == "residual_inplace":
        return FirstPositionLaw(np.minimum(p, q), _inplace_rejected(p, q))
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


def _inplace_rejected(p, q) -> np.ndarray:
    """P(reject, y) when the residual is (p − q·onehot(x))₊: after rejecting x (only
    when q(x) > p(x)) the correction is p(y) / (1 − p(x)) for y != x."""
    out = np.zeros_like(p)
    for x in np.flatnonzero(q > p):
        law = p.copy()
        law[x] = 0.0
        out += (q[x] - p[x]) * law / law.sum()
    return out


def t3_out_of_support(mutant: str, p, q, *, t3_mass=None, t3_miss=None) -> float:
    """P(t3 lies outside the support of p(t3 | t1, t2)) for one t1 under a bug that
    leaves t2's law exact (everything else: 0).

    p [C], q [C]: the filtered t2 laws. ``bonus_params`` (every t3 of a speculative group
    is drawn at a bonus position, after an accepted draft or in the next round's
    draft-free step, from the unfiltered target law): t3_mass [C], the unfiltered mass
    on supp p(t3 | t1, t2); P = Σ_t2 p(t2) (1 − t3_mass). ``async_stale_input`` (after a
    rejected draft x the next round's input is x, so t3 ~ p(t3 | t1, x)): t3_miss [C, C],
    t3_miss[x, y] = P_{t3 ~ p(· | t1, x)}(t3 ∉ supp p(· | t1, y)); P = Σ_x q(x) (1 −
    p(x)/q(x))₊ Σ_y res(y) t3_miss[x, y], res the correction law (p − q)₊ normalised.
    """
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    if mutant == "bonus_params":
        if t3_mass is None:
            raise ValueError("bonus_params needs t3_mass")
        return float(np.sum(p * (1.0 - np.clip(np.asarray(t3_mass, dtype=float), 0, 1))))
    if mutant == "async_stale_input":
        if t3_miss is None:
            raise ValueError("async_stale_input needs t3_miss")
        with np.errstate(divide="ignore", invalid="ignore"):
            reject = np.where(q > 0, np.clip(1.0 - p / q, 0.0, None), 0.0)
        res = np.maximum(p - q, 0.0)
        if res.sum() <= 0:
            return 0.0
        return float(q * reject @ np.asarray(t3_miss, dtype=float) @ (res / res.sum()))
    return 0.0


def one_sequence_statistic(p1, n: int, min_expected: float = 5.0) -> float:
    """The smallest Pearson χ² a t1 test can show when all n rows of a group commit the
    same t1 (``shared_rng`` with one batch per group: every row reads the first row's
    uniform block). Whichever cell c holds the token, O_c = n and the rest are 0, so
    χ² = n (1 / P_c − 1) on the cells pooled at the expected counts n p1; the smallest
    is at the heaviest final cell. Deterministic: a lower bound over every realisation."""
    from .pooling import pool_cells

    p1 = np.asarray(p1, dtype=np.float64) / np.sum(p1)
    pooled = pool_cells(n * p1, min_expected).apply(p1)
    return float(n * (1.0 / pooled.max() - 1.0))


# The pre-registered bug-class directions of the ``joint_score`` test (its definition:
# changing them is a new test type). Each is the named class's exact first-position law
# minus the correct one, on the joint (accept, reject) x token cells: the correction
# drawn from p (residual class), the accept coin reused for the correction (uniform
# reuse), q scored from another draft depth than the drafts came from (draft law: one
# direction per other depth; drafts that are q's argmax), the target tempered to T = 0.8
# (sampling parameters).
SCORE_DIRECTIONS = (
    "residual_from_p",
    "shared_uniform",
    "draft_q_mismatch",
    "greedy_draft",
    "target_temperature",
)


def score_directions(p, q, q_others=()) -> tuple[tuple[str, ...], np.ndarray]:
    """(names, [K, 2C] directions) for one stratum: SCORE_DIRECTIONS on p [C], q [C] and
    every other depth's q [C] (none: no draft-law direction)."""
    null = first_position_law(p, q).joint
    names, rows = [], []
    for name in SCORE_DIRECTIONS:
        others = list(q_others) if name == "draft_q_mismatch" else [None]
        for j, other in enumerate(others):
            law = first_position_law(p, q, name, q_other=other)
            names.append(name if len(others) == 1 else f"{name}[{j}]")
            rows.append(law.joint - null)
    return tuple(names), np.array(rows)
