"""Near-ties of the token comparisons (issue 32, part 1; docs/contracts.md "Numerics
model"): when one request batched and the same request alone commit different tokens,
was the deciding draw within the stated numerics error of a boundary?

The two runs share the request's uniforms (request-owned randomness: a pure function of
seed and round) but not their kernels, so their laws differ in the last bits. Under the
model (specconform.stats.numerics) every law either run computes lies within law_bound
of the serial reference law, so a decision can differ between them only if, under the
reference, its uniform lies within the error of a boundary. This module replays the
divergent round's decision chain under the reference laws with the engine's uniforms
(draft token j from q_j, accept coin, correction from (p_j - q_j)+, bonus from p_L; or a
plain target sample) up to the position where the runs part, and calls the divergence a
near-tie iff some decision of that chain is within its error:

- inverse CDF of a law: the uniform lies within ``law_bound`` of a CDF boundary;
- inverse CDF of the residual (p - q)+ / TV: within 6 law_bound / (TV - 2 law_bound)
  (stats.numerics.residual_bound);
- accept coin: |u q(x) - p(x)| <= ratio_bound (p(x) + u q(x)) (a relative move);
- greedy: the top two reference logits lie within 2 logit_bound of each other.

If no decision of the chain is within its error, both runs must have made the reference's
decisions, so a divergence refutes the model (or shows a bug): a mismatch, FAIL. A
divergence that cannot be classified (no uniforms, no events, another round shape) is a
mismatch too: near-ties are never assumed. Laws come through plain callables, so tests
drive this with synthetic laws and uniforms; no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specconform.adapters.sequence import RequestSpec, RoundUniforms, SequenceRecord
from specconform.stats.numerics import NumericsModel, residual_bound

LawAt = Callable[[Sequence[int]], np.ndarray]  # prefix -> [V] law


@dataclass(frozen=True)
class Decision:
    """One decision of the reference chain: how far its uniform (or logit gap) was from
    the nearest boundary, against the model's error there."""

    what: str  # "target", "draft j", "coin j", "correction j", "bonus", "greedy"
    margin: float
    bound: float

    @property
    def near(self) -> bool:
        return self.margin <= self.bound

    def to_json(self) -> dict:
        return {"decision": self.what, "margin": self.margin, "bound": self.bound}


def inverse_cdf(weights: np.ndarray, u: float) -> int:
    """The engine's categorical (sampling/categorical.py) on one row: the first token
    whose float64 CDF exceeds u * total; the last positive token when rounding runs out."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    cdf = np.cumsum(w)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return i if i < w.size else int(np.flatnonzero(w > 0)[-1])


def cdf_margin(weights: np.ndarray, u: float) -> float:
    """The distance of u from the nearest interior boundary of the normalised CDF
    (boundaries at 0 and 1 cannot flip a draw); 1.0 when there is none (one token)."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    cdf = np.cumsum(w) / w.sum()
    inner = cdf[(w > 0) & (cdf < 1.0)]
    return float(np.min(np.abs(inner - u))) if inner.size else 1.0


def target_decision(p: np.ndarray, u: float, model: NumericsModel) -> Decision:
    return Decision("target", cdf_margin(p, u), model.law_bound)


def greedy_decision(logits: np.ndarray, model: NumericsModel) -> Decision:
    """The gap of the top two logits against 2 logit_bound at the logits' own scale."""
    z = np.sort(np.asarray(logits, dtype=np.float64))[::-1]
    scaled = NumericsModel(
        model.dtype, model.reduction_length, model.kernels, float(np.max(np.abs(z))) or 1.0,
        model.growth,
    )  # fmt: skip
    gap = float(z[0] - z[1]) if z.size > 1 else np.inf
    return Decision("greedy", gap, 2.0 * scaled.logit_bound)


def round_decisions(
    prefix: Sequence[int],
    drafted: int,
    upto: int,
    u: RoundUniforms,
    p_at: LawAt,
    q_at: LawAt,
    model: NumericsModel,
) -> tuple[list[int], list[Decision]]:
    """The reference chain of one speculative round from ``prefix`` (L = ``drafted``
    drafts) through position ``upto``, stopping at its first near decision: the
    committed tokens and every decision made."""
    eps = model.law_bound
    prefix, tokens, decisions = list(prefix), [], []
    for j in range(min(upto, drafted) + 1):
        p = np.asarray(p_at(prefix), dtype=np.float64)
        if j == drafted:  # every draft accepted: the bonus from p_L
            tokens.append(inverse_cdf(p, u.bonus or 0.0))
            decisions.append(Decision("bonus", cdf_margin(p, u.bonus or 0.0), eps))
            break
        q = np.asarray(q_at(prefix), dtype=np.float64)
        x = inverse_cdf(q, u.draft[j])
        decisions.append(Decision(f"draft {j}", cdf_margin(q, u.draft[j]), eps))
        if decisions[-1].near:
            break
        coin, px, qx = u.coin[j], float(p[x]), float(q[x])
        scale = px + coin * qx  # 0: p(x) = 0 and coin q(x) = 0, rejected either way
        margin = abs(coin * qx - px) / scale if scale > 0 else np.inf
        decisions.append(Decision(f"coin {j}", float(margin), model.ratio_bound))
        if decisions[-1].near:
            break
        if coin * qx < px:
            tokens.append(x)
            prefix.append(x)
            continue
        residual = np.clip(p - q, 0.0, None)
        bound = residual_bound(eps, float(residual.sum()))
        tokens.append(inverse_cdf(residual, u.correction[j]))
        decisions.append(Decision(f"correction {j}", cdf_margin(residual, u.correction[j]), bound))
        break
    return tokens, decisions


@dataclass(frozen=True)
class Divergence:
    """Where two runs of one request part, and whether it was a near-tie."""

    step: int | None  # the first step whose token or event differs; None: equal
    compared: int  # tokens compared (decisions toward the near-tie limit)
    decision: Decision | None  # the near decision (near-tie), or the last one examined
    why: str = ""  # why it could not be classified (then a mismatch)

    @property
    def near_tie(self) -> bool:
        return self.decision is not None and self.decision.near


def first_event_divergence(a: SequenceRecord, b: SequenceRecord) -> int | None:
    """The first step where the tokens or the events (round, position, kind) differ; a
    length difference counts at the shorter one's end; None when equal."""
    ea, eb = a.events, b.events
    for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)):
        if x != y or (ea is not None and eb is not None and ea[i] != eb[i]):
            return i
    return None if len(a.tokens) == len(b.tokens) else min(len(a.tokens), len(b.tokens))


def classify(
    req: RequestSpec,
    a: SequenceRecord,
    b: SequenceRecord,
    model: NumericsModel,
    engine,
    draft_depth: int | None,
) -> Divergence:
    """Compare two runs of ``req``; at a divergence, replay its decision under the
    reference laws (``engine``: target_law_for, draft_law_for, target_logits,
    round_uniforms; the validated wrapper)."""
    if a.tokens == b.tokens:
        return Divergence(None, len(a.tokens), None)
    s = first_event_divergence(a, b)
    assert s is not None  # the tokens differ
    compared = s + 1
    if s >= min(len(a.tokens), len(b.tokens)):
        return Divergence(s, compared, None, "lengths differ with equal tokens")
    base = list(req.prompt)
    if req.greedy:  # a greedy token is the reference argmax, whatever the round did
        pairs = enumerate(zip(a.tokens, b.tokens, strict=False))
        d = next((i for i, (x, y) in pairs if x != y), None)
        if d is None:
            return Divergence(s, compared, None, "lengths differ with equal tokens")
        logits = engine.target_logits(base + list(a.tokens[:d]))
        if logits is None:
            return Divergence(d, d + 1, None, "the adapter has no target_logits()")
        return Divergence(d, d + 1, greedy_decision(logits, model))
    if a.events is None or b.events is None:
        return Divergence(s, compared, None, "the engine gives no token events")
    ev = a.events[s]
    u = engine.round_uniforms(req, ev.round, s)
    if u is None:
        return Divergence(s, compared, None, "the adapter has no round_uniforms()")
    if ev.round < 0:
        p = engine.target_law_for(base + list(a.tokens[:s]), req)
        return Divergence(s, compared, target_decision(p, u.target or 0.0, model))
    if a.rounds is None or b.rounds is None or draft_depth is None:
        return Divergence(s, compared, None, "no round telemetry")
    drafted = a.rounds[ev.round][0]
    if ev.round >= len(b.rounds) or b.rounds[ev.round][0] != drafted:
        return Divergence(s, compared, None, "the runs drafted differently in that round")
    start = s - ev.position
    _, decisions = round_decisions(
        base + list(a.tokens[:start]),
        drafted,
        ev.position,
        u,
        lambda prefix: engine.target_law_for(prefix, req),
        lambda prefix: engine.draft_law_for(prefix, req, draft_depth),
        model,
    )
    near = next((d for d in decisions if d.near), None)
    return Divergence(s, compared, near or (decisions[-1] if decisions else None))
