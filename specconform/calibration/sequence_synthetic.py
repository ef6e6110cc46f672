"""A tiny numpy speculative sampler over a fixed Markov chain of exact laws: raw frames of
a sequence run (requests.csv, tokens.csv, checks.json) with the real round, position
and slot structure, for the sequence evaluator's tests and its calibration.

The "model": the next token's logits depend on the previous token only, target
``L[prev]`` and draft ``L[prev] + noise_d`` (depth d: less noise). A request's target
law p is the request's sampling parameters applied to the target logits (temperature 0:
one-hot argmax), its draft law q the same parameters on the draft logits. A round:
draft x_j ~ q at j = 0..L-1 (L = min(K, remaining - 1)), accept iff u q(x) < p(x), on
rejection the correction ~ (p - q)+, after L accepts the bonus ~ p -- the exact
speculative sampling rule, so the committed tokens have law p at every prefix.

Planted bugs (``mutant``), each a real bug class:

- ``tempered_position1``: at draft position 1 the engine's p is p^(1/0.7) (a target law
  at the wrong temperature at one position);
- ``rounds_reuse``: each request reuses the same uniforms in every round;
- ``shared_requests``: requests 2i and 2i + 1 share their uniforms in every round;
- ``reject_position2``: the draft at position 2 is rejected with probability TV + 0.05;
- ``residual_from_p``: the correction is drawn from p instead of (p - q)+ (the engine's
  kernel mutant of that name);
- ``draft_raw_q``: drafts come from q (the request's parameters on the draft logits)
  but the accept rule and the residual use the raw draft law (temperature 1, no
  top-k/top-p), as the engine mutant of that name;
- ``late_round_residual``: from a request's third round (round index 2) on, the
  correction is drawn from p (the engine mutant of that name);
- ``shared_uniform``: the correction reuses the accept coin that rejected the draft
  (the kernel mutant of that name): its support stays the residual's, its law does not;
- ``top_p_drop_crossing``: at draft positions j >= 1 (and a bonus there) the engine's p
  of a top-p request drops its crossing token (the engine mutant of that name);
- ``bonus_overlap``: the bonus token's uniform is also the next round's first accept
  coin (the engine mutant ``rng_bonus_overlaps_next_round``: overlapping streams).

Every frame has the mechanism columns (specconform/stats/mechanism.py) from the
reported p and q at drafted positions, and the crossing columns
(specconform/stats/crossing.py) at every token of a top-p request.

Vectorized over the requests of a group (a Python loop over rounds and positions only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specconform.kinds.sequence.raw import (
    CROSS_COLUMNS,
    MECH_COLUMNS,
    REQUEST_COLUMNS,
    TOKEN_COLUMNS,
)
from specconform.stats.crossing import crossing_columns, crossing_tokens
from specconform.stats.mechanism import mechanism_columns

MUTANTS = (
    "tempered_position1",
    "rounds_reuse",
    "shared_requests",
    "reject_position2",
    "residual_from_p",
    "draft_raw_q",
    "late_round_residual",
    "shared_uniform",
    "top_p_drop_crossing",
    "bonus_overlap",
)
VOCAB = 32
EXTRA_REJECTION = 0.05
BUG_TEMPERATURE = 0.7


@dataclass(frozen=True)
class World:
    """Target logits [V, V] (row: previous token) and draft logits per depth d."""

    target: np.ndarray  # [V, V] float64
    draft: dict[int, np.ndarray]  # d -> [V, V] float64


def make_world(seed: int = 0, depths: tuple[int, ...] = (1, 2)) -> World:
    rng = np.random.default_rng(seed)
    target = rng.normal(0.0, 2.0, (VOCAB, VOCAB))
    draft = {d: target + rng.normal(0.0, 1.2 / d, (VOCAB, VOCAB)) for d in depths}
    return World(target, draft)


def law(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Rows of probabilities [V, V] for one sampling configuration (DESIGN's rule:
    temperature, then top-k keeping ties, then top-p, then softmax; T 0: one-hot)."""
    if temperature == 0.0:
        out = np.zeros_like(logits)
        out[np.arange(logits.shape[0]), logits.argmax(axis=1)] = 1.0
        return out
    z = logits / temperature
    if top_k:
        kth = np.sort(z, axis=1)[:, -min(top_k, z.shape[1])][:, None]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    if top_p < 1.0:
        order = np.argsort(-p, axis=1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=1)
        keep_sorted = np.cumsum(sorted_p, axis=1) - sorted_p < top_p  # prefix reaching top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=1, keepdims=True)
    return p


def _inverse_cdf(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Token with F(x - 1) <= u < F(x), always of positive weight.

    probs,  # [n, V] float64
    u,      # [n] float64
    """
    cdf = np.cumsum(probs, axis=1)
    x = (cdf <= u[:, None]).sum(axis=1)
    last = probs.shape[1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=1)
    return np.minimum(x, last)


def _drop_crossing(p_tab: np.ndarray, top_p: np.ndarray) -> np.ndarray:
    """p_tab [C, V, V] with each top-p row's crossing token removed (rows keeping >= 2
    tokens), renormalised: the engine law of ``top_p_drop_crossing``."""
    out = p_tab.copy()
    for c in np.flatnonzero(top_p):
        rows = out[c]  # [V, V]: one law per previous token
        crossing, _ = crossing_tokens(rows)
        at = np.flatnonzero(crossing >= 0)
        rows[at, crossing[at]] = 0.0
        rows[at] /= rows[at].sum(axis=1, keepdims=True)
    return out


def _tempered(p: np.ndarray) -> np.ndarray:
    q = p ** (1.0 / BUG_TEMPERATURE)
    return q / q.sum(axis=1, keepdims=True)


class _Recorder:
    """Token rows collected per event, as arrays."""

    def __init__(self, top_p: np.ndarray):
        self.parts: list[dict[str, np.ndarray]] = []
        self.top_p = top_p  # [n] bool: request i samples under top-p

    def add(self, req, step, token, rnd, pos, kind, drafted, p_rows, tv, q_rows=None):
        cross_p, cross_hit = crossing_columns(p_rows, token)
        off = ~self.top_p[req]
        cross_p[off], cross_hit[off] = np.nan, np.nan
        cdf = np.cumsum(p_rows, axis=1)
        p_tok = p_rows[np.arange(token.size), token]
        if q_rows is None:  # not a drafted position: no mechanism law
            mech_cdf = mech_p = np.full(token.size, np.nan)
        else:
            corrected = np.full(token.size, kind == "correction")
            mech_cdf, mech_p = mechanism_columns(p_rows, q_rows, token, corrected)
        self.parts.append(
            {
                "request": req,
                "step": step,
                "token": token,
                "round": rnd,
                "position": pos,
                "kind": np.full(req.size, kind, dtype=object),
                "drafted": drafted,
                "cdf_below": cdf[np.arange(token.size), token] - p_tok,
                "p_token": p_tok,
                "tv": tv,
                "mech_cdf_below": mech_cdf,
                "mech_p_token": mech_p,
                "cross_p": cross_p,
                "cross_hit": cross_hit,
            }
        )

    def frame(self, group: str) -> pd.DataFrame:
        cols = {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}
        frame = pd.DataFrame(cols)
        frame.insert(0, "group", group)
        frame["cdf_below"] = frame["cdf_below"].clip(lower=0.0)
        return frame.sort_values(["request", "step"], kind="stable").reset_index(drop=True)


def simulate_group(
    world: World,
    protocol: dict,
    group: dict,
    rng: np.random.Generator,
    mutant: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(requests rows, token rows) of one group of ``protocol`` (JSON data)."""
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {MUTANTS}")
    engine = protocol["engine"]
    n = group.get("requests") or protocol["seeds"]["count"]
    configs = [
        (
            float(
                engine.get("temperature", 1.0) if s.get("temperature") is None else s["temperature"]
            ),
            int(engine.get("top_k", 0) if s.get("top_k") is None else s["top_k"]),
            float(engine.get("top_p", 1.0) if s.get("top_p") is None else s["top_p"]),
        )
        for s in group.get("sampling") or [{}]
    ]
    lengths = group.get("max_tokens") or [engine.get("max_tokens", 256)]
    i = np.arange(n)
    cfg = i % len(configs)
    max_tokens = np.asarray(lengths, dtype=np.int64)[i % len(lengths)]
    prompts = group.get("prompts") or [0]
    state = np.asarray(prompts, dtype=np.int64)[i % len(prompts)] % VOCAB  # previous token
    d = group.get("draft_loops")
    p_tab = np.stack([law(world.target, *c) for c in configs])  # [C, V, V]
    q_tab = None if d is None else np.stack([law(world.draft[d], *c) for c in configs])
    # draft_raw_q: the accept rule's q is the raw draft law, whatever the parameters.
    q_acc_tab = q_tab
    if mutant == "draft_raw_q" and d is not None:
        q_acc_tab = np.stack([law(world.draft[d], 1.0, 0, 1.0) for _ in configs])
    p_eng1 = np.stack([_tempered(p) for p in p_tab]) if mutant == "tempered_position1" else p_tab
    top_p = np.array([t > 0 and 0 < tp < 1 for t, _, tp in configs])  # [C]
    # top_p_drop_crossing: the engine's p past the first draft position, crossing dropped.
    p_deep = _drop_crossing(p_tab, top_p) if mutant == "top_p_drop_crossing" else p_tab
    rec = _Recorder(top_p[cfg])
    # Prefill: the first token is a plain target sample.
    x = _inverse_cdf(p_tab[cfg, state], rng.random(n))
    minus = np.full(n, -1, dtype=np.int64)
    rec.add(
        i,
        np.zeros(n, np.int64),
        x,
        minus,
        minus,
        "target",
        minus,
        p_tab[cfg, state],
        np.full(n, np.nan),
    )
    state, steps, rounds = x, np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    k = int(engine.get("num_speculative_tokens", 3))
    fixed = rng.random((n, 2 * k + 2)) if mutant == "rounds_reuse" else None
    pending = np.full(n, np.nan)  # bonus_overlap: the last bonus's uniform, per request
    while True:
        live = np.flatnonzero(steps < max_tokens)
        if live.size == 0:
            break
        c, s = cfg[live], state[live]
        if q_tab is None:  # nospec: one target sample per step
            x = _inverse_cdf(p_tab[c, s], rng.random(live.size))
            rec.add(
                live,
                steps[live],
                x,
                minus[live],
                minus[live],
                "target",
                minus[live],
                p_tab[c, s],
                np.full(live.size, np.nan),
            )
            state[live], steps[live] = x, steps[live] + 1
            continue
        u = fixed[live] if fixed is not None else rng.random((live.size, 2 * k + 2))
        if mutant == "shared_requests":
            u = _share_pairs(live, u)
        if mutant == "bonus_overlap":  # coin 0 (u[:, 1]) is the previous bonus's uniform
            carried = np.isfinite(pending[live])
            u[carried, 1] = pending[live][carried]
            pending[live] = np.nan
        budget = np.minimum(k, max_tokens[live] - steps[live] - 1)  # the round's draft length L
        going = np.ones(live.size, dtype=bool)
        for j in range(k):
            at = np.flatnonzero(going & (j < budget))
            if at.size == 0:
                break
            cc, ss = c[at], s[at]
            p, q = p_tab[cc, ss], q_tab[cc, ss]
            p_eng = p_eng1[cc, ss] if j == 1 else p
            if j >= 1 and p_deep is not p_tab:
                p_eng = p_deep[cc, ss]
            xd = _inverse_cdf(q, u[at, 2 * j])
            rows = np.arange(at.size)
            tv = 0.5 * np.abs(p - q).sum(axis=1)
            assert q_acc_tab is not None  # drafts exist only in speculative groups
            q_acc = q_acc_tab[cc, ss]
            accept = u[at, 2 * j + 1] * q_acc[rows, xd] < p_eng[rows, xd]
            if mutant == "reject_position2" and j == 2:
                extra = EXTRA_REJECTION / np.maximum(1.0 - tv, EXTRA_REJECTION)
                accept &= u[at, 2 * k + 1] >= extra
            resid = np.maximum(p_eng - q_acc, 0.0)
            mass = resid.sum(axis=1, keepdims=True)
            resid = np.where(mass > 0, resid / np.where(mass > 0, mass, 1.0), p_eng)
            if mutant == "residual_from_p":
                resid = p_eng
            elif mutant == "late_round_residual":
                resid = np.where((rounds[live[at]] >= 2)[:, None], p_eng, resid)
            coin = u[at, 2 * j + 1] if mutant == "shared_uniform" else u[at, 2 * k]
            xc = _inverse_cdf(resid, coin)
            token = np.where(accept, xd, xc)
            who = live[at]
            for flag, kind in ((accept, "accepted"), (~accept, "correction")):
                sel = np.flatnonzero(flag)
                rec.add(
                    who[sel],
                    steps[who[sel]],
                    token[sel],
                    rounds[who[sel]],
                    np.full(sel.size, j, np.int64),
                    kind,
                    budget[at][sel],
                    p[sel],
                    tv[sel],
                    q[sel],
                )
            steps[who] += 1
            s[at] = token
            going[at[~accept]] = False
        bonus = np.flatnonzero(going)  # every draft accepted: the bonus at position L
        if bonus.size:
            who = live[bonus]
            p = p_tab[c[bonus], s[bonus]]
            deep = (budget[bonus] >= 1)[:, None]  # the bonus sits at position L
            xb = _inverse_cdf(np.where(deep, p_deep[c[bonus], s[bonus]], p), u[bonus, 2 * k])
            if mutant == "bonus_overlap":
                pending[who] = u[bonus, 2 * k]
            rec.add(
                who,
                steps[who],
                xb,
                rounds[who],
                budget[bonus],
                "bonus",
                budget[bonus],
                p,
                np.full(bonus.size, np.nan),
            )
            steps[who] += 1
            s[bonus] = xb
        state[live] = s
        rounds[live] += 1
    tokens = rec.frame(group["name"])
    greedy = np.array([configs[j][0] == 0.0 for j in cfg])
    offset = int(protocol["seeds"].get("offset", 0)) + int(group.get("seed_offset", 0))
    requests = pd.DataFrame(
        {
            "group": group["name"],
            "request": i,
            "prompt_index": np.asarray(prompts)[i % len(prompts)],
            "seed": np.where(greedy, -1, offset + i),
            "temperature": [configs[j][0] for j in cfg],
            "top_k": [configs[j][1] for j in cfg],
            "top_p": [configs[j][2] for j in cfg],
            "max_tokens": max_tokens,
            "stop_token_ids": "",
            "n_tokens": max_tokens,
            "finish_reason": "length",
        }
    )
    return requests[list(REQUEST_COLUMNS)], tokens[
        list(TOKEN_COLUMNS + MECH_COLUMNS + CROSS_COLUMNS)
    ]


def _share_pairs(live: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Request 2i + 1 takes request 2i's uniforms when both are live."""
    u = u.copy()
    where = {int(r): a for a, r in enumerate(live)}
    for a, r in enumerate(live):
        if r % 2 == 1 and int(r) - 1 in where:
            u[a] = u[where[int(r) - 1]]
    return u


def simulate(
    protocol: dict, seed: int, mutant: str | None = None, world: World | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(requests frame, tokens frame, checks dict) of a whole protocol, every check a
    clean pass (the deterministic checks are the runner's, not the sampler's)."""
    world = world or make_world(0)
    rng = np.random.default_rng(seed)
    reqs, toks = [], []
    for group in protocol["groups"]:
        r, t = simulate_group(
            world, protocol, group, rng, mutant if group["mode"] != "nospec" else None
        )
        reqs.append(r)
        toks.append(t)
    return (
        pd.concat(reqs, ignore_index=True),
        pd.concat(toks, ignore_index=True),
        clean_checks(protocol),
    )


def clean_checks(protocol: dict) -> dict:
    """checks.json of a correct engine: nothing mismatched; under a numerics block the
    derived tolerances, the model, and no near-tie (kinds/sequence/numerics.py)."""
    from specconform.kinds.sequence.numerics import (
        TOKEN_TYPES,
        check_model,
        check_tolerance,
        counts_near_ties,
        model_json,
    )
    from specconform.protocol.schema_sequence import DETERMINISTIC_TYPES

    out = {}
    for t in protocol["tests"]:
        if t["type"] not in DETERMINISTIC_TYPES:
            continue
        checked = int(t.get("sample") or 8)
        rec = {
            "type": t["type"],
            "applicable": True,
            "why": "",
            "checked": checked,
            "mismatches": 0,
            "max_abs_diff": 0.0,
            "tolerance": check_tolerance(protocol, t),
            "examples": [],
        }
        model = check_model(protocol, t)
        token = t["type"] in TOKEN_TYPES
        if model is not None and (t.get("tolerance") == "model" or token):
            rec["numerics"] = model_json(model)
        if model is not None and counts_near_ties(t):
            rec.update(near_ties=0, decisions=checked, near_tie_examples=[])
        out[t["name"]] = rec
    return out
