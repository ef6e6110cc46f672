"""The bundled engine's engine-only planted bugs, sampled from their exact laws (no engine),
and a check of those laws against the engine itself.

specconform.stats.mutant_laws derives, from the reference laws (with the unfiltered
``raw`` block of bench/calibration_make_reference.py), what each engine-only bug commits:
the first-position law of ``target_default_params``, ``draft_raw_q`` and
``residual_inplace``; the out-of-support t3 of ``bonus_params`` and
``async_stale_input``; the one-sequence-per-batch samples of ``shared_rng``.
:func:`simulate_engine_bug` draws a protocol's samples.csv from those mechanisms, seed
by seed (one row of uniforms per seed, as specconform.calibration.simulate, so groups
sharing seeds share draws), and :func:`replicate_engine_bug` judges them with the real
evaluator (bench/kill_matrix.py's measured columns).

``--check``: runs the bundled engine (tiny preset, CPU) under each bug and tests the
derived law against what it committed (Pearson on the joint accept/reject x t2 cells
of every t1 stratum with >= 200 samples, summed; out-of-support t3 as a binomial), and
the correct law as the negative control:

    .venv/bin/python bench/kill_matrix_laws.py --check --seeds 8000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from _checkout import ROOT

from specconform.calibration.replicate import replicate_draws
from specconform.calibration.world import World, _draw, _sample_group, simulate_groups
from specconform.planning import _group_law, raw_laws, t3_laws
from specconform.stats.mutant_laws import affects

ENGINE_BUGS = (
    "target_default_params",
    "draft_raw_q",
    "residual_inplace",
    "bonus_params",
    "async_stale_input",
    "shared_rng",
)
# t3 drawn at a bonus position with the unfiltered target law (both branches: the bonus
# after an accepted draft, the draft-free round after a correction).
UNFILTERED_T3 = ("target_default_params", "bonus_params")
_TABLES: dict = {}  # per-world dense tables, built once per process


def _outside(tokens, vocab: int) -> int:
    """A token id outside ``tokens`` (stands for 'any out-of-support token')."""
    used = {int(t) for t in tokens}
    return next(t for t in range(vocab) if t not in used)


def _raw_tables(w: World, d: int):
    """([A, M + 1] unfiltered target law with the outside cell last, [A, M] unfiltered
    draft law at depth d) on the world's cells; cached."""
    key = (id(w), "raw", d)
    if key not in _TABLES:
        a, m = w.u_tokens.shape
        p_raw, q_raw = np.zeros((a, m + 1)), np.zeros((a, m))
        for i in range(a):
            laws = raw_laws(w, i, d)
            c = laws["q_raw"].size
            p_raw[i, :c], p_raw[i, m] = laws["p_raw"][:c], laws["p_raw"][-1]
            q_raw[i, :c] = laws["q_raw"]
        _TABLES[key] = (p_raw, q_raw)
    return _TABLES[key]


def _first_position(w: World, i: np.ndarray, u: np.ndarray, d: int, bug: str):
    """(cell j [n], accepted [n], draft cell x [n]) for rows of t1 index i: the bug's
    accept rule and residual, as the engine's hooks build them."""
    n = i.size
    p, q = w.p2[i], w.q2[d][i]
    if bug == "target_default_params":  # P = unfiltered softmax, plus an 'outside' cell
        p = _raw_tables(w, d)[0][i]
        q = np.pad(q, ((0, 0), (0, 1)))
    q_score = _raw_tables(w, d)[1][i] if bug == "draft_raw_q" else q
    rows = np.arange(n)
    x = _draw(q, u[:, 1])
    ok = u[:, 2] * q_score[rows, x] < p[rows, x]
    resid = np.maximum(p - q_score, 0.0)
    if bug == "residual_inplace":  # q zeroed except at the draft: residual p without x
        resid = p.copy()
        resid[rows, x] = np.maximum(p[rows, x] - q[rows, x], 0.0)
    resid = np.where(resid.sum(1, keepdims=True) > 0, resid, p)
    return np.where(ok, x, _draw(resid, u[:, 3])), ok, x


def _t3_tables(w: World):
    """Dense p(t3 | t1, cell) including draft-only cells ([A, M, S] tokens and laws) and
    the unfiltered mass on each filtered t3 support ([A, M], 1 where unknown); cached."""
    key = id(w)
    if key not in _TABLES:
        a, m = w.u_tokens.shape
        laws = [t3_laws(w, i) for i in range(a)] if "raw" in w.reference else None
        s = max((len(x) for row in laws for x in row), default=1) if laws else 1
        toks, probs = np.zeros((a, m, s), dtype=np.int64), np.zeros((a, m, s))
        mass = np.ones((a, m))
        for i in range(a):
            for c in range(m):
                law = laws[i][c] if laws and c < len(laws[i]) else {}
                items = sorted((int(t), float(v)) for t, v in law.items())
                toks[i, c, : len(items)] = [t for t, _ in items]
                probs[i, c, : len(items)] = [v for _, v in items]
                k = f"{int(w.t1_tokens[i])},{int(w.u_tokens[i, c])}"
                mass[i, c] = (w.reference.get("raw") or {}).get("p_t3_mass", {}).get(k, 1.0)
        _TABLES[key] = (toks, probs, mass)
    return _TABLES[key]


def _t3(w: World, i, j, x, ok, u, bug: str, mode: str) -> np.ndarray:
    """t3 per row: the correct law p(t3 | t1, t2), except where the bug changes it."""
    m = w.u_tokens.shape[1]
    inside = j < m  # t2 outside every filtered support is already out of support
    jc = np.minimum(j, m - 1)
    cond = jc.copy()
    if bug == "async_stale_input" and mode == "async":
        cond = np.where(ok, jc, x)  # the stale draft x is the next round's input
    if bug in ("async_stale_input", *UNFILTERED_T3):
        toks, probs, mass = _t3_tables(w)
    else:
        toks, probs, mass = w.p3_tokens, w.p3, np.ones(w.u_tokens.shape)
    law = probs[i, cond]
    has = inside & (law.sum(1) > 0)
    v = u[:, 4].copy()
    miss = 1.0 - mass[i, jc] if bug in UNFILTERED_T3 else np.zeros(i.size)
    out_rows = has & (v < miss)  # the unfiltered mass outside the filtered support
    v = np.where(miss < 1, (v - miss) / np.maximum(1.0 - miss, 1e-300), v)
    draw = has & ~out_rows
    t3 = np.full(i.size, -1)
    t3[draw] = toks[i[draw], cond[draw], _draw(law[draw], np.clip(v[draw], 0, 1 - 1e-16))]
    vocab = int(w.reference.get("vocab_size", 1 << 20))
    for r in np.flatnonzero(out_rows):
        t3[r] = _outside(toks[i[r], jc[r]][probs[i[r], jc[r]] > 0], vocab)
    return t3


def _group(w: World, u: np.ndarray, g: dict, bug: str, batch: int) -> dict:
    d, mode = g.get("draft_loops"), g["mode"]
    if not affects(bug, mode):
        return _sample_group(w, u, d, None)
    if bug == "shared_rng":  # every row of a batch reads the batch's first row's block
        first = (np.arange(u.shape[0]) // batch) * batch
        return _sample_group(w, u[first], d, None)
    if bug in ("bonus_params", "async_stale_input"):  # first position exact
        clean = _sample_group(w, u, d, None)
        i = np.searchsorted(w.t1_tokens, clean["t1"])
        j, ok, x = _first_position(w, i, u, d, "none")
        clean["t3"] = _t3(w, i, j, x, ok, u, bug, mode)
        return clean
    i = _draw(np.broadcast_to(w.p1, (u.shape[0], w.p1.size)), u[:, 0])
    j, ok, x = _first_position(w, i, u, d, bug)
    m = w.u_tokens.shape[1]
    t2 = np.where(j < m, w.u_tokens[i, np.minimum(j, m - 1)], -1)
    vocab = int(w.reference.get("vocab_size", 1 << 20))
    for r in np.flatnonzero(j >= m):
        t2[r] = _outside(w.u_tokens[i[r]], vocab)
    first = ok.astype(np.int64)
    return {
        "t1": w.t1_tokens[i],
        "t2": t2,
        "t3": _t3(w, i, j, x, ok, u, bug, mode),
        "first_accepted": first,
        "drafted": np.full(i.size, 3),
        "accepted": first * (1 + (u[:, 5] < 0.8) + (u[:, 5] < 0.64)),
    }


def simulate_engine_bug(
    w: World, protocol: dict, n_seeds: int, rng: np.random.Generator, bug: str, offset: int = 0
) -> pd.DataFrame:
    """samples.csv of ``protocol``'s groups under engine bug ``bug`` (ENGINE_BUGS)."""
    if bug not in ENGINE_BUGS:
        raise ValueError(f"unknown engine bug {bug!r}; known: {', '.join(ENGINE_BUGS)}")
    batch = int(protocol["engine"].get("batch_size") or n_seeds)
    return simulate_groups(
        protocol["groups"], n_seeds, rng, lambda u, g: _group(w, u, g, bug, batch), offset=offset
    )


def replicate_engine_bug(
    w: World, protocol: dict, replications: int, seed: int, bug: str, start: int = 0
) -> pd.DataFrame:
    """RUN_COLUMNS rows, as specconform.calibration.replicate, for an engine bug."""
    return replicate_draws(
        protocol,
        w.reference,
        lambda n, rng, offset: simulate_engine_bug(w, protocol, n, rng, bug, offset=offset),
        replications,
        seed,
        start=start,
    )


_JOB: dict = {}


def _init(world: World, protocol: dict) -> None:
    _JOB["world"], _JOB["protocol"] = world, protocol


def _chunk(args) -> pd.DataFrame:
    start, count, seed, bug = args
    return replicate_engine_bug(_JOB["world"], _JOB["protocol"], count, seed, bug, start=start)


def run_engine_bug(
    world: World, protocol: dict, replications: int, seed: int, bug: str, workers: int = 2
) -> pd.DataFrame:
    """Replications 0..n-1 over ``workers`` processes (deterministic per replication)."""
    from concurrent.futures import ProcessPoolExecutor

    size = max(1, -(-replications // (4 * max(workers, 1))))
    jobs = [(s, min(size, replications - s), seed, bug) for s in range(0, replications, size)]
    if workers <= 1:
        _init(world, protocol)
        return pd.concat(map(_chunk, jobs), ignore_index=True)
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(world, protocol)) as pool:
        return pd.concat(pool.map(_chunk, jobs), ignore_index=True)


# --- the laws against the engine ----------------------------------------------------------


def _joint_fit(w: World, frame: pd.DataFrame, d: int, bug: str, min_samples: int, control=False):
    """Pearson χ² of the joint (accepted?, t2) cells against the bug's law (``control``:
    the correct law on the same cells), summed over t1 strata >= min_samples."""
    from specconform.stats import pearson_gof, sum_chi2

    results = []
    for i, t1 in enumerate(w.t1_tokens):
        s = frame[frame.t1 == t1]
        if len(s) < min_samples:
            continue
        p, q, law = _group_law(w, i, d, bug)
        m = p.size
        if control:
            law = _group_law(w, i, d, None)[2]
            law = type(law)(
                np.pad(law.accepted, (0, m - p[: law.accepted.size].size)),
                np.pad(law.rejected, (0, m - law.rejected.size)),
            )
        toks = [int(t) for t in w.u_tokens[i] if t >= 0]
        col = np.array([toks.index(t) if t in toks else m - 1 for t in s.t2])
        acc = s.acc.to_numpy() == 1
        counts = np.bincount(col + np.where(acc, 0, m), minlength=2 * m)
        results.append(pearson_gof(counts, law.joint))
    return sum_chi2(results)


def check(seeds: int, bugs) -> str:
    from scipy import stats as sps

    from specconform.adapters.bundled import BundledEngine
    from specconform.calibration import load_reference, world_from_reference
    from specconform.planning import group_out_of_support
    from specconform.protocol.load import load_protocol

    loaded = load_protocol(ROOT / "protocols/ci_gate.yaml")
    w = world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))
    group = next(g for g in loaded.model.groups if g.mode == "async" and g.draft_loops == 1)
    lines = [
        f"### Derived laws against the bundled engine (tiny, CPU, async d=1, {seeds} seeds)\n",
        "| bug | statistic | derived law: chi2 / df, p | correct law (control): p |",
        "| --- | --- | --- | --- |",
    ]
    for bug in bugs:
        engine = BundledEngine(loaded.model.engine, mutant=bug, log=lambda line: None)
        recs = engine.run_group(group, list(range(7_000_000, 7_000_000 + seeds)))
        frame = pd.DataFrame(
            [(r.tokens[0], r.tokens[1], r.tokens[2], r.first_accepted) for r in recs],
            columns=["t1", "t2", "t3", "acc"],
        )
        if bug in ("target_default_params", "draft_raw_q", "residual_inplace"):
            fit, ctl = (
                _joint_fit(w, frame, 1, bug, 200),
                _joint_fit(w, frame, 1, bug, 200, control=True),
            )
            lines.append(
                f"| {bug} | joint cells | {fit.statistic:.1f} / {fit.df}, p = {fit.pvalue:.3g} "
                f"| {ctl.pvalue:.3g} |"
            )
        if bug in ("target_default_params", "bonus_params", "async_stale_input"):
            pi = sum(
                w.p1[i] * group_out_of_support(w, i, 1, "async", bug) for i in range(len(w.p1))
            )
            bad = int(_oos_count(w, frame))
            p_two = sps.binomtest(bad, len(frame), pi).pvalue
            lines.append(
                f"| {bug} | out-of-support t2 or t3: {bad}/{len(frame)} vs derived "
                f"{pi:.4f} | binomial p = {p_two:.3g} | (correct law: 0 expected) |"
            )
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def _oos_count(w: World, frame: pd.DataFrame) -> int:
    ref = w.reference
    bad = 0
    for t1, t2, t3 in frame[["t1", "t2", "t3"]].itertuples(index=False):
        law2 = ref["p_t2"].get(str(t1), {})
        if str(t2) not in law2:
            bad += 1
        elif str(t3) not in ref["p_t3"].get(f"{t1},{t2}", {}):
            bad += 1
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="run the engine against the laws")
    ap.add_argument("--seeds", type=int, default=8000)
    ap.add_argument("--bugs", nargs="*", default=[b for b in ENGINE_BUGS if b != "shared_rng"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not args.check:
        ap.error("nothing to do: pass --check (the simulator is used by bench/kill_matrix.py)")
    text = check(args.seeds, args.bugs)
    Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
