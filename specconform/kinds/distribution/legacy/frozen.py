"""Copies of the evaluator helpers the schema-1 evaluator used when it was frozen.

The live evaluator (`kinds.distribution.context`, `mechanism`, `rows`, `tokens`) may
change for new runs; archives of the first results schema must keep re-deriving exactly
what they state, so the frozen evaluator reads its samples, strata and rows through
these copies, never through the live modules. Do not change them: a fix for new runs
goes in the live modules. The duplicated lines between this module and the live ones are
on purpose (a FROZEN copy, kept byte-for-byte); never merge them. Only the statistics primitives (`specconform.stats`) and the
detail records (`specconform.details`) are shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.details.distribution import GofStratum, SupportCounts, SupportDetail
from specconform.evidence.jsonio import json_number
from specconform.results import FAIL, PASS, TestRow
from specconform.stats import pearson_gof
from specconform.stats.cells import align, dense_on, strata
from specconform.stats.speculative import joint_cells, total_variation

COLUMNS = ("seed", "t1", "t2", "t3", "first_accepted", "drafted", "accepted")


@dataclass(frozen=True)
class GroupData:
    """One group's samples sorted by seed; every array [N] int64 (error [N] bool)."""

    seed: np.ndarray
    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    first_accepted: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    error: np.ndarray | None = None  # finish_reason == "error"; None: not recorded

    def take(self, mask: np.ndarray) -> GroupData:
        err = None if self.error is None else self.error[mask]
        return GroupData(*(getattr(self, c)[mask] for c in COLUMNS), error=err)

    @classmethod
    def empty(cls) -> GroupData:
        return cls(*(np.zeros(0, dtype=np.int64),) * len(COLUMNS))


def split(samples, vocab_size: int) -> dict[str, GroupData]:
    """Per-group int64 columns, sorted by seed. Every token outside [0, vocab_size) other
    than -1 (not generated) becomes ``vocab_size``: out of support everywhere, and small
    enough for the int64 codes of (t1, t2, t3)."""
    out = {}
    for name, frame in samples.groupby("group", sort=True):
        frame = frame.sort_values("seed", kind="stable")
        cols = [frame[c].to_numpy(dtype=np.int64) for c in COLUMNS]
        for k in (1, 2, 3):  # t1, t2, t3
            t = cols[k]
            cols[k] = np.where((t >= vocab_size) | (t < -1), vocab_size, t)
        error = None
        if "finish_reason" in frame.columns:
            error = (frame["finish_reason"].astype(str) == "error").to_numpy()
        out[str(name)] = GroupData(*cols, error=error)
    return out


def gof_stratum(res, tokens, counts, probs, labels=None, **where) -> GofStratum:
    """A goodness-of-fit stratum's record: counts per original cell, what pooled;
    ``where`` names it (group=..., or t1=/t2=, tv= for a joint-cell stratum)."""
    names = labels if labels is not None else [int(t) for t in tokens]
    return GofStratum(
        **where,
        n=res.n,
        statistic=json_number(res.statistic),
        df=res.df,
        pvalue=json_number(res.pvalue),
        cells=res.cells,
        out_of_support=res.out_of_support,
        pooled=tuple(names[i] for i in res.pooled),
        tokens=tuple(names),
        observed=tuple(int(c) for c in counts),
        expected=tuple(float(res.n * p) for p in probs / probs.sum()),
    )


def support_row(ctx) -> TestRow:
    """Observations of zero reference probability at t1, t2 or t3, any group: one is fatal.

    A position is checked only when its prefix is possible (an impossible t1 is counted
    once, at t1); tokens outside [0, vocab_size) are always out of support.
    """
    ref, w, per, total, n = ctx.ref, ctx.width, {}, 0, 0
    codes2, codes3, keys3 = ref.codes(w)
    for name, g in sorted(ctx.data.items()):
        ok1 = g.t1 >= 0
        bad1 = ok1 & ~np.isin(g.t1, ref.p1[0])
        ok2 = ok1 & ~bad1 & (g.t2 >= 0)
        pair = g.t1 * w + g.t2
        bad2 = ok2 & ~np.isin(pair, codes2)
        ok3 = ok2 & ~bad2 & (g.t3 >= 0) & np.isin(pair, keys3)
        bad3 = ok3 & ~np.isin(pair * w + g.t3, codes3)
        per[name] = SupportCounts(t1=int(bad1.sum()), t2=int(bad2.sum()), t3=int(bad3.sum()))
        total += per[name].t1 + per[name].t2 + per[name].t3
        n += int(ok1.sum() + ok2.sum() + ok3.sum())
    detail = SupportDetail(per_group=per, rule="any observation with reference probability 0 fails")
    ok = total == 0
    return TestRow(
        "out_of_support",
        "primary",
        float(total),
        None,
        None,
        n,
        ctx.alpha,
        ok,
        detail,
        status=PASS if ok else FAIL,
        pvalue_method="none (deterministic: impossible under the null)",
        reason="" if ok else "out of support",
    )


def gof_strata(ctx, name: str, depth: int, gof=pearson_gof):
    """Goodness of fit of t2 (depth 2) or t3 (depth 3) per stratum of group ``name``:
    (results, per-stratum records, skipped impossible strata, eligible samples).
    ``gof`` is the per-stratum test (the schema-1 evaluator passes its own reading)."""
    g = ctx.group(name)
    ok = (g.t1 >= 0) & (g.t2 >= 0) & ((g.t3 >= 0) if depth == 3 else True)
    g = g.take(ok)
    # One int64 key per conditioning prefix: t1, or (t1, t2) coded as t1 * width + t2.
    key_of = g.t1 if depth == 2 else g.t1 * ctx.width + g.t2
    tested = g.t2 if depth == 2 else g.t3
    keys, _ = strata(key_of, ctx.min_samples)
    results, per, skipped = [], [], []
    for key in keys:
        if depth == 2:
            where, law = {"t1": int(key)}, ctx.ref.law(ctx.ref.p2, int(key), "p_t2")
        else:
            t1, t2 = divmod(int(key), ctx.width)
            where, law = {"t1": t1, "t2": t2}, ctx.ref.law(ctx.ref.p3, (t1, t2), "p_t3")
        if law is None:
            skipped.append(where)
            continue
        tokens, probs, counts = align(*law, tested[key_of == key])
        res = gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        per.append(gof_stratum(res, tokens, counts, probs, **where))
    return results, per, skipped, int(ok.sum())


def first_position_strata(ctx, d: int, g: GroupData):
    """([(t1, p, q), ...] for every stratum with at least min_samples samples,
    [{"t1": t1}, ...] for those the reference omits as impossible)."""
    keys, _ = strata(g.t1, ctx.min_samples)
    tested, skipped = [], []
    for t1 in keys:
        p = ctx.ref.law(ctx.ref.p2, int(t1), "p_t2")
        q = ctx.ref.law(ctx.ref.q2.get(d, {}), int(t1), f"q_t2[{d}]")
        if p is None or q is None:
            skipped.append({"t1": int(t1)})
        else:
            tested.append((t1, p, q))
    return tested, skipped


def joint_strata(ctx, g: GroupData, tested, gof=pearson_gof) -> tuple[list, list]:
    """Per tested stratum (t1, p, q): the joint-cell test and its record. ``gof`` is the
    per-stratum test (the schema-1 evaluator passes its own reading)."""
    results, per = [], []
    for t1, p, q in tested:
        sel = g.t1 == t1
        x, acc = g.t2[sel], g.first_accepted[sel]
        # Cells: supp p U supp q U observed (an observed token outside both has probability 0).
        tokens = np.union1d(np.union1d(p[0], q[0]), x)
        pp, qq = dense_on(tokens, *p), dense_on(tokens, *q)
        probs = joint_cells(pp, qq)
        cell = np.searchsorted(tokens, x) + np.where(acc == 1, 0, tokens.size)
        counts = np.bincount(cell, minlength=2 * tokens.size)
        res = gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        labels = [f"acc:{t}" for t in tokens.tolist()] + [f"rej:{t}" for t in tokens.tolist()]
        tv = total_variation(pp, qq)
        per.append(gof_stratum(res, tokens, counts, probs, labels=labels, t1=int(t1), tv=tv))
    return results, per
