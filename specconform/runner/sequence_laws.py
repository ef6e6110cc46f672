"""Per-request reduction of a sequence run: the serial reference law of every prefix,
reduced at once to the PIT columns of raw/sequence/tokens.csv.

One request at a time (the laws of one request are [T, V]; V is 49,152 on the GPU
preset, so all requests' laws at once would not fit): for token x_t at prefix
prompt + tokens[:t], ``cdf_below`` = sum of p_t(v) over v < x_t and ``p_token`` =
p_t(x_t), both in float64, and ``tv`` = TV(p_t, q_t) at drafted positions (events
accepted or correction), q at the group's draft depth; there too ``mech_cdf_below`` and
``mech_p_token``, the token's F(x - 1) and f(x) under its conditional law given the
accept decision (specconform/stats/mechanism.py: (p - q)+ / TV for a correction,
min(p, q) / (1 - TV) for an accepted draft).

Laws come from teacher forcing (`sequence_laws`: one forward for every prefix) when the
run trusts it -- its ``teacher_forcing`` test compared a pre-registered sample of
prefixes with the incremental replay and found them equal -- and from the incremental
serial replay (`target_law_for` / `draft_law_for`, one forward per prefix) otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.kinds.sequence.raw import MECH_COLUMNS, NO_EVENTS, TOKEN_COLUMNS
from specconform.runner.filter_ties import residual_explained, token_margin, token_margins
from specconform.stats.crossing import crossing_columns
from specconform.stats.mechanism import mechanism_columns
from specconform.stats.numerics import NumericsModel

DRAFTED_KINDS = ("accepted", "correction")  # tokens that sat at a drafted position
P_TOKEN_AT = TOKEN_COLUMNS.index("p_token")  # where token_rows puts p_token ...
MECH_P_AT = len(TOKEN_COLUMNS) + MECH_COLUMNS.index("mech_p_token")  # ... and mech_p_token


@dataclass(frozen=True)
class TokenSlot:
    """How one committed token came about (the tokens.csv columns round..drafted)."""

    round: int
    position: int
    kind: str
    drafted: int


def token_slots(record: SequenceRecord) -> list[TokenSlot]:
    if record.events is None:
        return [TokenSlot(NO_EVENTS, NO_EVENTS, "unknown", -1) for _ in record.tokens]
    rounds = record.rounds or ()
    return [
        TokenSlot(e.round, e.position, e.kind, rounds[e.round][0] if e.round >= 0 else -1)
        for e in record.events
    ]


@dataclass
class RequestLaws:
    """p_t for every step ([T, V]) and q_t where the request needs it (None: no q)."""

    p: np.ndarray  # [T, V] float32/float64
    q: np.ndarray | dict[int, np.ndarray] | None  # [T, V], or {step: [V]}

    def q_at(self, t: int) -> np.ndarray | None:
        if self.q is None:
            return None
        if isinstance(self.q, dict):
            return self.q.get(t)
        return self.q[t]


def incremental_laws(
    engine, req: RequestSpec, tokens: Sequence[int], depth: int | None, q_steps: Sequence[int]
) -> RequestLaws:
    """One serial forward per prefix (the reference path itself)."""
    prompt = list(req.prompt)
    rows = [engine.target_law_for(prompt + list(tokens[:t]), req) for t in range(len(tokens))]
    p = np.stack(rows) if rows else np.zeros((0, engine.vocab_size), dtype=np.float32)
    q = None
    if depth is not None and engine.info.capabilities.draft_law:
        q = {}
        for t in q_steps:
            law = engine.draft_law_for(prompt + list(tokens[:t]), req, depth)
            if law is not None:
                q[t] = law
    return RequestLaws(p, q)


def teacher_forced_laws(
    engine, req: RequestSpec, tokens: Sequence[int], depth: int | None
) -> RequestLaws | None:
    got = engine.sequence_laws(req, list(tokens), depth)
    return None if got is None else RequestLaws(got[0], got[1])


def normalized(law: np.ndarray) -> np.ndarray:
    """The law in float64, renormalised: a float32 law's mass is 1 only to a few ulps
    per entry, so its float64 CDF can pass 1 by ~1e-7 (and U with it); dividing by the
    float64 sum makes F_t(x_t - 1) + p_t(x_t) <= 1 to float64 rounding. [V] float64."""
    law = np.asarray(law, dtype=np.float64)
    return law / law.sum()


def token_rows(
    group: str, request: int, record: SequenceRecord, laws: RequestLaws, top_p: bool = False
) -> list[tuple]:
    """The tokens.csv rows of one request (columns of raw.TOKEN_COLUMNS, then
    raw.MECH_COLUMNS, then raw.CROSS_COLUMNS). The mechanism columns of all drafted
    tokens come from one vectorized call (a call per token would cost more than the
    rest of the row). ``top_p``: the request samples under top-p (0 < top_p < 1, T > 0),
    so its tokens get the crossing columns (specconform/stats/crossing.py)."""
    rows = []
    cross: list[tuple[float, float]] = []
    mech_at, mech_p, mech_q, mech_x, mech_fix = [], [], [], [], []
    for t, (x, slot) in enumerate(zip(record.tokens, token_slots(record), strict=True)):
        p = normalized(laws.p[t])
        cdf_below = float(np.sum(p[:x]))
        p_token = float(p[x])
        tv = float("nan")
        if slot.kind in DRAFTED_KINDS:
            q = laws.q_at(t)
            if q is not None:
                q = normalized(q)
                tv = 0.5 * float(np.abs(p - q).sum())
                mech_at.append(t)
                mech_p.append(p)
                mech_q.append(q)
                mech_x.append(int(x))
                mech_fix.append(slot.kind == "correction")
        rows.append(
            (group, request, t, int(x), slot.round, slot.position, slot.kind, slot.drafted)
            + (cdf_below, p_token, tv)
        )
        if top_p:
            c_p, c_hit = crossing_columns(p[None, :], np.array([int(x)]))
            cross.append((float(c_p[0]), float(c_hit[0])))
        else:
            cross.append((float("nan"), float("nan")))
    mech = [(float("nan"), float("nan"))] * len(rows)
    if mech_at:
        c, f = mechanism_columns(np.stack(mech_p), np.stack(mech_q), mech_x, mech_fix)
        for i, t in enumerate(mech_at):
            mech[t] = (float(c[i]), float(f[i]))
    return [row + m + c for row, m, c in zip(rows, mech, cross, strict=True)]


def drafted_steps(record: SequenceRecord) -> list[int]:
    return [t for t, s in enumerate(token_slots(record)) if s.kind in DRAFTED_KINDS]


def support_margins(
    engine,
    req: RequestSpec,
    tokens: Sequence[int],
    rows: Sequence[tuple],
    laws: RequestLaws,
    depth: int | None,
    model_for,
) -> list[float]:
    """The filter_margin column of one request's token_rows (raw.FILTER_COLUMNS): at a
    token of reference probability 0 (p_token 0, or mech_p_token 0), how far the filter
    decision that dropped it lies from flipping, in units of the numerics model's error
    (``model_for(temperature)``, None: no numerics block, the column stays empty).

    p_token 0: the token's own decision under the request's top-k/top-p (greedy: top-k
    1 at T 1) on the reference's unfiltered law at its prefix. mech_p_token 0 with
    p_token > 0: the conditional law (p - q)+ / TV or min(p, q) moves with the *supports*
    of p and q, so the smallest margin of any decision of either law, provided those
    near-ties can reach the token at all (else inf). ``laws``: the request's filtered
    reference laws (the rows' own); only the unfiltered ones cost a replay, at these rare
    tokens (one forward for a marginal zero, two for a mechanism zero)."""
    out = [math.nan] * len(rows)
    model: NumericsModel | None = model_for(req.temperature)
    if model is None:
        return out
    top_k, top_p = (1, 1.0) if req.greedy else (int(req.top_k), float(req.top_p))
    bare = replace(req, temperature=req.temperature or 1.0, top_k=0, top_p=1.0)
    bounds = {"logit_bound": model.logit_bound, "law_bound": model.law_bound}
    for t, row in enumerate(rows):
        marginal = row[P_TOKEN_AT] == 0.0
        if not (marginal or row[MECH_P_AT] == 0.0):  # NaN compares False
            continue
        if top_k == 0 and top_p >= 1.0:
            out[t] = math.inf  # no filter decides it: a real out-of-support token
            continue
        prefix = list(req.prompt) + list(tokens[:t])
        u_p = engine.target_law_for(prefix, bare)
        if marginal:
            out[t] = token_margin(u_p, int(tokens[t]), top_k, top_p, **bounds)
            continue
        q = laws.q_at(t)  # a mechanism zero sits at a drafted position, where q exists
        u_q = None if q is None or depth is None else engine.draft_law_for(prefix, bare, depth)
        if q is None or u_q is None:
            out[t] = math.inf  # no draft law to judge q's support by
            continue
        m_p = token_margins(u_p, top_k, top_p, **bounds)
        m_q = token_margins(u_q, top_k, top_p, **bounds)
        reach = residual_explained(
            (laws.p[t], q, u_p, u_q), m_p <= 1.0, m_q <= 1.0, int(tokens[t]),
            law_bound=model.law_bound,
        )  # fmt: skip
        out[t] = float(min(m_p.min(), m_q.min())) if reach else math.inf
    return out
