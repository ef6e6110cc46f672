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


# Rows of one request reduced at once: a chunk's float64 laws are [CHUNK, V] (25 MB at
# V = 49,152), so the law pass's threads hold a bounded amount each.
ROWS_PER_CHUNK = 64


def normalized_rows(laws: np.ndarray) -> np.ndarray:
    """``normalized`` of every row of [N, V] at once, bit for bit (a float64 sum over a
    contiguous row is the same pairwise sum whether numpy reduces one row or many:
    tests/toolkit/test_sequence_token_rows.py). [N, V] float64."""
    rows = np.asarray(laws, dtype=np.float64)
    return rows / rows.sum(axis=1, keepdims=True)


def token_rows(
    group: str, request: int, record: SequenceRecord, laws: RequestLaws, top_p: bool = False
) -> list[tuple]:
    """The tokens.csv rows of one request (columns of raw.TOKEN_COLUMNS, then
    raw.MECH_COLUMNS, then raw.CROSS_COLUMNS). The float64 passes over the vocabulary
    (normalization, TV, the mechanism and crossing columns) run on chunks of
    ``ROWS_PER_CHUNK`` rows at once, row by row the same numbers as one token at a time
    (a call per token cost 1.4 ms at V = 49,152, mostly numpy's per-call overhead);
    only the prefix sums F(x - 1), one per token over its own x entries, stay a loop.
    ``top_p``: the request samples under top-p (0 < top_p < 1, T > 0), so its tokens
    get the crossing columns (specconform/stats/crossing.py)."""
    tokens = np.asarray(record.tokens, dtype=np.int64)
    slots = token_slots(record)
    T = len(slots)
    nan2 = (float("nan"), float("nan"))
    rows, mech, cross = [], [nan2] * T, [nan2] * T
    for a in range(0, T, ROWS_PER_CHUNK):
        b = min(T, a + ROWS_PER_CHUNK)
        p = normalized_rows(laws.p[a:b])  # [b - a, V]
        q_at = {t: laws.q_at(t) for t in range(a, b) if slots[t].kind in DRAFTED_KINDS}
        q_drafted = {t: q for t, q in q_at.items() if q is not None}
        drafted = list(q_drafted)
        tv: dict[int, float] = {}
        if drafted:
            at = [t - a for t in drafted]
            p_d = p[at]
            q_d = normalized_rows(np.stack(list(q_drafted.values())))
            d = 0.5 * np.abs(p_d - q_d).sum(axis=1)
            fix = [slots[t].kind == "correction" for t in drafted]
            c, f = mechanism_columns(p_d, q_d, tokens[drafted], fix)
            for i, t in enumerate(drafted):
                tv[t] = float(d[i])
                mech[t] = (float(c[i]), float(f[i]))
        if top_p:
            c_p, c_hit = crossing_columns(p, tokens[a:b])
            for t in range(a, b):
                cross[t] = (float(c_p[t - a]), float(c_hit[t - a]))
        for t in range(a, b):
            x, slot, row = int(tokens[t]), slots[t], p[t - a]
            rows.append(
                (group, request, t, x, slot.round, slot.position, slot.kind, slot.drafted)
                + (float(np.sum(row[:x])), float(row[x]), tv.get(t, float("nan")))
            )
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
