"""Exact laws and samples drawn from them (see :mod:`specconform.calibration`).

A :class:`World` holds exact laws as dense tables (:func:`world_from_reference`,
:func:`make_world`); :func:`simulate` draws ``samples.csv`` for the protocol's own groups
with the first draft position exactly as the sampling core does it. ``MUTANTS`` are the
wrong samplers of the power side.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

K = 3  # drafts per round; only used for the drafted/accepted telemetry

# Wrong samplers. Each changes the first draft position (or the token after it).
MUTANTS = {
    "residual_from_p": "correction drawn from p instead of (p - q)+",
    "q_one_hot": "acceptance scored with q one-hot at the draft (law exact, acceptance low)",
    "greedy_draft": "draft is argmax q but scored with softmax q",
    "draft_q_mismatch": "draft drawn from q at depth d, scored with q of the other depth",
    "target_temperature": "target law at the draft position built with temperature 0.8",
    "bonus_off_by_one": "after an accepted draft, t3 drawn from the previous position's law",
    "shared_uniform": "the correction reuses the accept coin u instead of a fresh uniform",
    "bf16_q": "q rounded to bfloat16 in the accept rule and the residual",
}

# The group layout shared by protocols/ci_gate.yaml and protocols/fp32_t2.yaml, used only
# as simulate()'s default (tests/toolkit/test_calibration.py checks it against both
# files); calibration always passes the protocol's own groups.
STANDARD_GROUPS = (
    {"name": "nospec", "mode": "nospec", "seed_offset": 1_000_000},
    {"name": "sync", "mode": "sync", "draft_loops": 2},
    {"name": "async", "mode": "async", "draft_loops": 2},
    {"name": "sync_d1", "mode": "sync", "draft_loops": 1},
    {"name": "async_d1", "mode": "async", "draft_loops": 1},
)


def evaluate_frames(protocol: dict, samples: pd.DataFrame, reference):
    """The distribution evaluator, imported in this one place."""
    from specconform.kinds.distribution import evaluate_frames as evaluate

    return evaluate(protocol, samples, reference)


# --- exact laws ----------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """Exact laws as dense tables for fast sampling, plus the reference.json dict.

    Row i of the t2 tables belongs to the i-th first token ``t1_tokens[i]``; its M
    columns are ``u_tokens[i]``, the union of the supports of p_t2 and every q_t2
    (padded with -1 tokens of weight 0). A (t1, t2) without a p_t3 (a run's reference
    replays only observed pairs) has an all-zero p3 row: its t3 is "not generated" (-1).
    """

    reference: dict
    t1_tokens: np.ndarray  # [A] int64
    p1: np.ndarray  # [A] float64
    u_tokens: np.ndarray  # [A, M] int64
    p2: np.ndarray  # [A, M] float64
    q2: dict  # depth -> [A, M] float64
    p3_tokens: np.ndarray  # [A, M, S] int64: t3 support given (t1 row, t2 column)
    p3: np.ndarray  # [A, M, S] float64


def world_from_reference(ref: dict) -> World:
    """Dense tables from a reference.json dict (needs p_t2 and q_t2 for every t1)."""
    law = {int(k): float(v) for k, v in ref["p_t1"].items() if float(v) > 0}
    t1_tokens = np.array(sorted(law), dtype=np.int64)
    depths = sorted(int(d) for d in ref.get("q_t2", {}))
    missing = [
        int(t)
        for t in t1_tokens
        if str(t) not in ref["p_t2"] or any(str(t) not in ref["q_t2"][str(d)] for d in depths)
    ]
    if missing:
        raise ValueError(
            f"reference has no p_t2/q_t2 for first tokens {missing[:5]}: "
            "simulation and planning need the laws of every possible t1"
        )
    sparse = {}
    for t1 in t1_tokens:
        sparse[t1] = [_sparse(ref["p_t2"][str(t1)])] + [
            _sparse(ref["q_t2"][str(d)][str(t1)]) for d in depths
        ]
    unions = {t1: np.unique(np.concatenate([s[0] for s in laws])) for t1, laws in sparse.items()}
    a, m = t1_tokens.size, max(u.size for u in unions.values())
    p3_laws = {
        tuple(int(x) for x in k.split(",")): _sparse(v) for k, v in ref.get("p_t3", {}).items()
    }
    s = max((t.size for t, _ in p3_laws.values()), default=1)
    u_tokens = np.full((a, m), -1, dtype=np.int64)
    tables = np.zeros((1 + len(depths), a, m))
    p3_tokens, p3 = np.zeros((a, m, s), dtype=np.int64), np.zeros((a, m, s))
    for i, t1 in enumerate(t1_tokens):
        toks = unions[t1]
        u_tokens[i, : toks.size] = toks
        for j, (t, p) in enumerate(sparse[t1]):
            tables[j, i, np.searchsorted(toks, t)] = p
        for c, t2 in enumerate(toks):
            if (int(t1), int(t2)) in p3_laws:
                t, p = p3_laws[int(t1), int(t2)]
                p3_tokens[i, c, : t.size], p3[i, c, : t.size] = t, p
    p1 = np.array([law[int(t)] for t in t1_tokens])
    return World(
        ref,
        t1_tokens,
        p1,
        u_tokens,
        tables[0],
        {d: tables[1 + j] for j, d in enumerate(depths)},
        p3_tokens,
        p3,
    )


def load_reference(path: str | Path) -> dict:
    """reference.json from a file, or the ``raw/reference.json`` of an evidence archive."""
    path = Path(path)
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("raw/reference.json")]
            if not names:
                raise ValueError(f"{path}: archive has no raw/reference.json")
            return json.load(io.BytesIO(z.read(names[0])))
    return json.loads(path.read_text())


def _sparse(law: dict) -> tuple[np.ndarray, np.ndarray]:
    items = sorted((int(k), float(v)) for k, v in law.items() if float(v) > 0)
    return (np.array([k for k, _ in items], dtype=np.int64), np.array([v for _, v in items]))


def _topk_law(logits: np.ndarray, k: int) -> np.ndarray:
    """softmax restricted to the k largest logits (the engine's top-k), float64."""
    keep = np.argsort(-logits, kind="stable")[:k]
    w = np.zeros_like(logits)
    w[keep] = np.exp(logits[keep] - logits[keep].max())
    return w / w.sum()


def make_world(
    seed: int = 0,
    vocab: int = 512,
    top_k: int = 20,
    spread: float = 2.4,
    tv_targets: dict | None = None,
) -> World:
    """Deterministic synthetic laws (a test fixture): top-k supports; q at depth d is p's
    logits plus noise scaled so that the p_t1-weighted mean TV is ``tv_targets[d]``
    (default {2: 0.1, 1: 0.35}); ``spread`` 2.4 gives five first tokens above 4 % mass."""
    tv_targets = tv_targets or {2: 0.1, 1: 0.35}
    rng = np.random.default_rng(seed)
    p1_dense = _topk_law(rng.normal(0, spread, vocab), top_k)
    t1_tokens = np.flatnonzero(p1_dense)
    logits2 = rng.normal(0, spread, (t1_tokens.size, vocab))
    noise = {d: rng.normal(0, 1, (t1_tokens.size, vocab)) for d in tv_targets}
    p2_dense = np.array([_topk_law(z, top_k) for z in logits2])
    q2_dense = {}
    for d, target in tv_targets.items():
        lo, hi = 0.0, 10.0
        for _ in range(50):  # bisection on the noise scale: mean TV is increasing in it
            mid = (lo + hi) / 2
            q = np.array(
                [_topk_law(z + mid * e, top_k) for z, e in zip(logits2, noise[d], strict=True)]
            )
            tv = 0.5 * np.abs(p2_dense - q).sum(1) @ p1_dense[t1_tokens]
            lo, hi = (mid, hi) if tv < target else (lo, mid)
        q2_dense[d] = q
    support = (p2_dense > 0) | np.any([q > 0 for q in q2_dense.values()], axis=0)
    ref = {
        "vocab_size": vocab,
        "p_t1": _as_dict(p1_dense),
        "p_t2": {},
        "p_t3": {},
        "q_t2": {str(d): {} for d in q2_dense},
    }
    for i, t1 in enumerate(t1_tokens):
        ref["p_t2"][str(t1)] = _as_dict(p2_dense[i])
        for d, q in q2_dense.items():
            ref["q_t2"][str(d)][str(t1)] = _as_dict(q[i])
        for t2 in np.flatnonzero(support[i]):
            if p2_dense[i, t2] > 0:
                ref["p_t3"][f"{t1},{t2}"] = _as_dict(_topk_law(rng.normal(0, spread, vocab), top_k))
    return world_from_reference(ref)


def _as_dict(law: np.ndarray) -> dict:
    return {str(int(t)): float(law[t]) for t in np.flatnonzero(law)}


# --- sampling ------------------------------------------------------------------------------


def _draw(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row: weights [N, M] >= 0, u [N] in [0, 1) -> column [N].

    The first column whose normalized float64 CDF exceeds u: a column of weight 0 is
    never chosen (its CDF equals its predecessor's), as in the sampling core.
    """
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    idx = (cdf <= u[:, None]).sum(axis=1)
    last = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    return np.minimum(idx, last)  # u within rounding of 1 lands on the last positive cell


def simulate(
    world: World,
    n_seeds: int,
    rng: np.random.Generator,
    *,
    offset: int = 0,
    mutant: str | None = None,
    groups=STANDARD_GROUPS,
) -> pd.DataFrame:
    """samples.csv for ``groups`` over seeds ``offset + seed_offset + i`` (i < n_seeds)."""
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {sorted(MUTANTS)}")
    return simulate_groups(
        groups,
        n_seeds,
        rng,
        lambda u, g: _sample_group(world, u, g.get("draft_loops"), mutant),
        offset=offset,
    )


def simulate_groups(
    groups,
    n_seeds: int,
    rng: np.random.Generator,
    sample: Callable[[np.ndarray, dict], dict],
    *,
    offset: int = 0,
) -> pd.DataFrame:
    """samples.csv for ``groups``: ``sample(u, group)`` gives a group's columns from its
    rows of uniforms ([n_seeds, 6] float64, one row per seed)."""
    seeds = {g["name"]: offset + (g.get("seed_offset") or 0) + np.arange(n_seeds) for g in groups}
    all_seeds = np.unique(np.concatenate(list(seeds.values())))
    # One row of uniforms per seed: groups sharing a seed share its randomness exactly.
    uniforms = rng.random((all_seeds.size, 6))
    frames = []
    for g in groups:
        u = uniforms[np.searchsorted(all_seeds, seeds[g["name"]])]
        frames.append(
            pd.DataFrame(
                {
                    "group": g["name"],
                    "seed": seeds[g["name"]],
                    **sample(u, g),
                    "finish_reason": "length",
                }
            )
        )  # exact laws: no errors
    return pd.concat(frames, ignore_index=True)


def _sample_group(w: World, u: np.ndarray, d: int | None, mutant: str | None) -> dict:
    n = u.shape[0]
    rows = np.arange(n)
    i = _draw(np.broadcast_to(w.p1, (n, w.p1.size)), u[:, 0])  # t1 row index
    p = w.p2[i]
    if d is None:  # nospec: t2 straight from p
        j = _draw(p, u[:, 3])
        first, drafted, accepted = np.full(n, -1), np.zeros(n, int), np.zeros(n, int)
    else:
        q = w.q2[d][i]
        if mutant == "target_temperature":
            p = np.where(p > 0, p ** (1 / 0.8), 0.0)
            p /= p.sum(1, keepdims=True)
        q_score = q
        if mutant == "draft_q_mismatch":
            others = [e for e in w.q2 if e != d]
            if not others:
                raise ValueError("draft_q_mismatch needs q_t2 at two draft depths")
            q_score = w.q2[others[0]][i]
        if mutant == "bf16_q":
            from specconform.stats.mutant_laws import bf16

            q_score = bf16(q.astype(np.float32))
        x = np.argmax(q, axis=1) if mutant == "greedy_draft" else _draw(q, u[:, 1])
        if mutant == "q_one_hot":
            q_score = np.zeros_like(q)
            q_score[rows, x] = 1.0
        ok = u[:, 2] * q_score[rows, x] < p[rows, x]  # the core's accept rule
        resid = p if mutant == "residual_from_p" else np.maximum(p - q_score, 0.0)
        resid = np.where(resid.sum(1, keepdims=True) > 0, resid, p)  # p == q: never used
        coin = u[:, 2] if mutant == "shared_uniform" else u[:, 3]
        j = np.where(ok, x, _draw(resid, coin))
        first = ok.astype(np.int64)
        drafted = np.full(n, K)
        # Later positions only feed the reported mean accepted/drafted, not any test.
        accepted = first * (1 + (u[:, 5] < 0.8) + (u[:, 5] < 0.64))
    t3_law = w.p3[i, j]
    has = t3_law.sum(1) > 0  # no p_t3 for this pair (or t2 outside p's support): no t3
    t3 = np.full(n, -1)
    t3[has] = w.p3_tokens[i[has], j[has], _draw(t3_law[has], u[has, 4])]
    if mutant == "bonus_off_by_one" and d is not None:
        wrong = first == 1
        t3[wrong] = w.u_tokens[i[wrong], _draw(w.p2[i[wrong]], u[wrong, 4])]
    return {
        "t1": w.t1_tokens[i],
        "t2": w.u_tokens[i, j],
        "t3": t3,
        "first_accepted": first,
        "drafted": drafted,
        "accepted": accepted,
    }
