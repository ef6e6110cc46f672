"""Calibration of the distribution tests without an engine (issue 5, proof (1)).

Samples are drawn directly from exact, synthetic reference laws shaped like the
engine's (top-k-20 supports, a few dominant first tokens, draft laws q at TV ≈ 0.1
for depth 2 and ≈ 0.35 for depth 1), with the first draft position simulated
exactly as the sampling core does it: draft x ~ q, accept iff u·q(x) < p(x), else the
correction from (p - q)₊. The full evaluator (:func:`evaluate_frames`: every test,
pooling and stratification rule) runs on each replication, so the measured false-fail
rate covers everything between the samples and the verdict.

Dependence is reproduced, not assumed away: groups are keyed by seed and every seed
owns one row of uniforms, so sync and async (same seeds, same depth) produce identical
samples and all four speculative groups share t1. The combination rules must stay
valid under exactly this dependence.

Mutants (speculative groups only) give the power side: each is a wrong sampler.
Numpy/scipy/pandas only; no torch, no engine.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specconform.kinds.distribution import Reference, evaluate_frames

K = 3  # drafts per round in fp32_t2; only used for the drafted/accepted telemetry

# Wrong samplers. Each changes the first draft position (or the token after it).
MUTANTS = {
    "residual_from_p": "correction drawn from p instead of (p - q)+",
    "q_one_hot": "acceptance scored with q one-hot at the draft (law exact, acceptance low)",
    "greedy_draft": "draft is argmax q but scored with softmax q",
    "draft_q_mismatch": "draft drawn from q at depth d, scored with q of the other depth",
    "target_temperature": "target law at the draft position built with temperature 0.8",
    "bonus_off_by_one": "after an accepted draft, t3 drawn from the previous position's law",
}

# Issue 5's fp32_t2 groups and tests, with its alpha and strata rule.
GROUPS = [
    {"name": "nospec", "mode": "nospec", "draft_loops": None, "seed_offset": 1_000_000},
    {"name": "sync", "mode": "sync", "draft_loops": 2, "seed_offset": 0},
    {"name": "async", "mode": "async", "draft_loops": 2, "seed_offset": 0},
    {"name": "sync_d1", "mode": "sync", "draft_loops": 1, "seed_offset": 0},
    {"name": "async_d1", "mode": "async", "draft_loops": 1, "seed_offset": 0},
]
_SPEC = ["sync", "async", "sync_d1", "async_d1"]
TESTS = (
    [{"name": "t1_nospec", "type": "t1_gof", "role": "prerequisite", "groups": ["nospec"]},
     {"name": "t1_speculative", "type": "t1_gof", "role": "prerequisite", "groups": _SPEC},
     {"name": "t2_async", "type": "t2_gof", "role": "primary", "groups": ["async"]},
     {"name": "t2_async_vs_nospec", "type": "t2_homogeneity", "role": "primary",
      "groups": ["async", "nospec"]}]
    + [{"name": f"t2_{g}", "type": "t2_gof", "role": "secondary", "groups": [g]}
       for g in ("sync", "sync_d1", "async_d1")]
    + [{"name": f"t2_{g}_vs_nospec", "type": "t2_homogeneity", "role": "secondary",
        "groups": [g, "nospec"]} for g in ("sync", "sync_d1", "async_d1")]
    + [{"name": "t2_async_vs_sync", "type": "t2_homogeneity", "role": "secondary",
        "groups": ["async", "sync"]},
       {"name": "t2_async_d1_vs_sync_d1", "type": "t2_homogeneity", "role": "secondary",
        "groups": ["async_d1", "sync_d1"]},
       {"name": "t3_async", "type": "t3_gof", "role": "exploratory", "groups": ["async"]}]
    + [{"name": f"acceptance_{g}", "type": "acceptance", "role": "mechanism", "groups": [g]}
       for g in _SPEC]
    + [{"name": f"joint_{g}", "type": "joint", "role": "secondary", "groups": [g]}
       for g in _SPEC])
PROTOCOL = {"kind": "distribution", "name": "fp32_t2_calibration", "alpha": 0.01,
            "strata": {"min_samples": 200, "min_expected": 5.0},
            "groups": GROUPS, "tests": TESTS}


# --- synthetic laws ------------------------------------------------------------------------

@dataclass(frozen=True)
class World:
    """Exact laws as dense tables for fast sampling, plus the reference.json dict.

    Row i of the t2 tables belongs to the i-th first token ``t1_tokens[i]``; its M
    columns are ``u_tokens[i]``, the union of the supports of p_t2 and both q's
    (padded with -1 tokens of weight 0).
    """

    reference: dict
    t1_tokens: np.ndarray   # [A] int64
    p1: np.ndarray          # [A] float64
    u_tokens: np.ndarray    # [A, M] int64
    p2: np.ndarray          # [A, M] float64
    q2: dict                # depth -> [A, M] float64
    p3_tokens: np.ndarray   # [A, M, S] int64: t3 support given (t1 row, t2 column)
    p3: np.ndarray          # [A, M, S] float64 (zero rows where p2 is 0)


def _topk_law(logits: np.ndarray, k: int) -> np.ndarray:
    """softmax restricted to the k largest logits (the engine's top-k), float64."""
    keep = np.argsort(-logits, kind="stable")[:k]
    w = np.zeros_like(logits)
    w[keep] = np.exp(logits[keep] - logits[keep].max())
    return w / w.sum()


def make_world(seed: int = 0, vocab: int = 512, top_k: int = 20, spread: float = 2.4,
               tv_targets: dict | None = None) -> World:
    """Deterministic synthetic laws; q at depth d is p's logits plus noise scaled so that
    the TV averaged over first tokens (weighted by p_t1) is ``tv_targets[d]`` (default
    {2: 0.1, 1: 0.35}); ``spread`` sets how peaked the laws are (2.4: five first tokens
    above 4 % mass, as in the engine's top-k-20 runs, and two (t1, t2) pairs above 4 %)."""
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
            q = np.array([_topk_law(z + mid * e, top_k) for z, e in zip(logits2, noise[d],
                                                                         strict=True)])
            tv = 0.5 * np.abs(p2_dense - q).sum(1) @ p1_dense[t1_tokens]
            lo, hi = (mid, hi) if tv < target else (lo, mid)
        q2_dense[d] = q
    support = (p2_dense > 0) | np.any([q > 0 for q in q2_dense.values()], axis=0)
    m = int(support.sum(1).max())
    a = t1_tokens.size
    u_tokens = np.full((a, m), -1, dtype=np.int64)
    p2 = np.zeros((a, m))
    q2 = {d: np.zeros((a, m)) for d in q2_dense}
    p3_tokens = np.zeros((a, m, top_k), dtype=np.int64)
    p3 = np.zeros((a, m, top_k))
    ref = {"vocab_size": vocab, "p_t1": _sparse(p1_dense), "p_t2": {}, "p_t3": {},
           "q_t2": {str(d): {} for d in q2_dense}}
    for i, t1 in enumerate(t1_tokens):
        toks = np.flatnonzero(support[i])
        u_tokens[i, :toks.size] = toks
        p2[i, :toks.size] = p2_dense[i, toks]
        ref["p_t2"][str(t1)] = _sparse(p2_dense[i])
        for d, q in q2_dense.items():
            q2[d][i, :toks.size] = q[i, toks]
            ref["q_t2"][str(d)][str(t1)] = _sparse(q[i])
        for j, t2 in enumerate(toks):
            if p2_dense[i, t2] == 0:
                continue
            law = _topk_law(rng.normal(0, spread, vocab), top_k)
            nz = np.flatnonzero(law)
            p3_tokens[i, j, :nz.size], p3[i, j, :nz.size] = nz, law[nz]
            ref["p_t3"][f"{t1},{t2}"] = _sparse(law)
    return World(ref, t1_tokens, p1_dense[t1_tokens], u_tokens, p2, q2, p3_tokens, p3)


def _sparse(law: np.ndarray) -> dict:
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


def simulate(world: World, n_seeds: int, rng: np.random.Generator, *, offset: int = 0,
             mutant: str | None = None, groups=GROUPS) -> pd.DataFrame:
    """samples.csv for ``groups`` over seeds ``offset + seed_offset + i`` (i < n_seeds)."""
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {sorted(MUTANTS)}")
    seeds = {g["name"]: offset + g["seed_offset"] + np.arange(n_seeds) for g in groups}
    all_seeds = np.unique(np.concatenate(list(seeds.values())))
    # One row of uniforms per seed: groups sharing a seed share its randomness exactly.
    uniforms = rng.random((all_seeds.size, 6))
    frames = []
    for g in groups:
        u = uniforms[np.searchsorted(all_seeds, seeds[g["name"]])]
        cols = _sample_group(world, u, g.get("draft_loops"), mutant)
        frames.append(pd.DataFrame({"group": g["name"], "seed": seeds[g["name"]], **cols,
                                    "finish_reason": "length"}))  # exact laws: no errors
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
            q_score = w.q2[min(w.q2) if d != min(w.q2) else max(w.q2)][i]
        x = np.argmax(q, axis=1) if mutant == "greedy_draft" else _draw(q, u[:, 1])
        if mutant == "q_one_hot":
            q_score = np.zeros_like(q)
            q_score[rows, x] = 1.0
        ok = u[:, 2] * q_score[rows, x] < p[rows, x]  # the core's accept rule
        resid = p if mutant == "residual_from_p" else np.maximum(p - q_score, 0.0)
        resid = np.where(resid.sum(1, keepdims=True) > 0, resid, p)  # p == q: never used
        j = np.where(ok, x, _draw(resid, u[:, 3]))
        first = ok.astype(np.int64)
        drafted = np.full(n, K)
        # Later positions only feed the reported mean accepted/drafted, not any test.
        accepted = first * (1 + (u[:, 5] < 0.8) + (u[:, 5] < 0.64))
    t3_law = w.p3[i, j]
    has = t3_law.sum(1) > 0  # a t2 outside p's support (wrong sampler) has no t3 law
    t3 = np.full(n, -1)
    t3[has] = w.p3_tokens[i[has], j[has], _draw(t3_law[has], u[has, 4])]
    if mutant == "bonus_off_by_one" and d is not None:
        wrong = first == 1
        t3[wrong] = w.u_tokens[i[wrong], _draw(w.p2[i[wrong]], u[wrong, 4])]
    return {"t1": w.t1_tokens[i], "t2": w.u_tokens[i, j], "t3": t3, "first_accepted": first,
            "drafted": drafted, "accepted": accepted}


# --- replications --------------------------------------------------------------------------

def replicate(world: World, replications: int, n_seeds: int, seed: int, *,
              mutant: str | None = None, protocol: dict = PROTOCOL, start: int = 0
              ) -> pd.DataFrame:
    """One row per replication and test: test, role, pvalue, passed, rejected, verdict.

    Replication r uses numpy's generator seeded with (seed, r) and the seed range
    ``r * 10 * n_seeds`` (disjoint across replications, like fresh runs).
    """
    ref = Reference(world.reference)
    alpha = float(protocol["alpha"])
    out = []
    for r in range(start, start + replications):
        rng = np.random.default_rng([seed, r])
        samples = simulate(world, n_seeds, rng, offset=r * 10 * n_seeds, mutant=mutant,
                           groups=protocol["groups"])
        ev = evaluate_frames(protocol, samples, ref)
        for row in ev.tests:
            # Rejection at alpha, also for exploratory rows (which never decide).
            rejected = row.passed is False or (row.passed is None and row.pvalue is not None
                                               and row.pvalue < alpha)
            out.append((r, row.test, row.role, row.pvalue, row.passed, rejected,
                        ev.verdict.verdict))
    return pd.DataFrame(out, columns=["replication", "test", "role", "pvalue", "passed",
                                      "rejected", "verdict"])


def summarize(runs: pd.DataFrame, alpha: float, level: float = 0.99) -> pd.DataFrame:
    """Per test: rejections, replications, rate, Clopper-Pearson interval at ``level``,
    and whether the nominal ``alpha`` lies inside it. The verdict's row is 'VERDICT'."""
    from statsmodels.stats.proportion import proportion_confint

    per = runs.groupby("test", sort=False).agg(role=("role", "first"),
                                               rejections=("rejected", "sum"),
                                               replications=("rejected", "size"))
    verdict = runs.drop_duplicates("replication")
    per.loc["VERDICT"] = ["verdict", int((verdict["verdict"] == "FAIL").sum()), len(verdict)]
    per["rate"] = per["rejections"] / per["replications"]
    lo, hi = proportion_confint(per["rejections"].astype(int), per["replications"].astype(int),
                                alpha=1 - level, method="beta")
    per["ci_low"], per["ci_high"] = np.asarray(lo), np.asarray(hi)
    per["alpha_inside"] = (per["ci_low"] <= alpha) & (alpha <= per["ci_high"])
    return per.reset_index()


def verdict_bound(protocol: dict = PROTOCOL) -> float:
    """Union bound on the verdict's false-fail rate: alpha per deciding α-level test
    (prerequisite and primary rows; the out-of-support row cannot fail on exact laws)."""
    roles = protocol.get("decision_roles") or ("prerequisite", "primary")
    deciding = [t for t in protocol["tests"] if t["role"] in roles]
    return min(1.0, len(deciding) * float(protocol["alpha"]))
