"""Mechanism tests at the first draft position of a speculative group (after prompt + t1).

- ``acceptance``: rejection has probability exactly TV(p_t2[t1], q_t2[d][t1]). Each
  stratum is an exact two-sided binomial test (scipy's binomtest); strata combine by
  Bonferroni over their exact p-values (:func:`specconform.stats.rate.stratified_rate_test`,
  valid under any dependence, exact level per stratum). The strata's 2-cell χ² are
  reported beside it, not used to decide (a sparse cell makes their df 0).
- ``joint``: the committed t2 split by accept/reject against min(p, q) and (p - q)₊ (the
  2V joint cells, :func:`specconform.stats.speculative.joint_cells`); strata summed.
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import AcceptanceDetail, RejectionStratum
from specconform.evidence.jsonio import json_number
from specconform.stats import pearson_gof
from specconform.stats.cells import dense_on, on_union
from specconform.stats.rate import rate_test, stratified_rate_test
from specconform.stats.speculative import joint_cells, total_variation

from .context import Context
from .rows import NOT_APPLICABLE_NO_Q, Coverage, gof_stratum, not_applicable_row, stratified_row
from .tally import Cells, GroupTally


def acceptance(ctx: Context, spec: dict):
    if not ctx.ref.draft_law:
        return not_applicable_row(ctx, spec, NOT_APPLICABLE_NO_Q), None
    name, d, whole, g = _speculative(ctx, spec)
    tested, skipped = first_position_strata(ctx, d, g)
    results, per = [], []
    for t1, p, q in tested:
        tv = total_variation(*on_union(*p, *q)[1:])
        s = g.take(g.t1 == t1)
        res = rate_test(
            int(s.count[s.first_accepted == 0].sum()), s.n, tv, min_expected=ctx.min_expected
        )
        results.append(res)
        per.append(
            RejectionStratum(
                t1=int(t1),
                n=res.n,
                tv=tv,
                rejected=res.k,
                expected_rejection_rate=tv,
                observed_rejection_rate=res.rate,
                binom_pvalue=json_number(res.pvalue),
                expected=(res.n * (1 - tv), res.n * tv),
                observed=(res.n - res.k, res.k),
                chi2_statistic=json_number(res.chi2_statistic),
                chi2_df=res.chi2_df,
                chi2_pvalue=json_number(res.chi2_pvalue),
                pooled=tuple(res.pooled),
            )
        )
    comb = stratified_rate_test(results)
    drafted, accepted = whole.drafted[1], whole.accepted[1]  # sums clipped at 0
    expected_rate = comb.expected_events / comb.n if comb.n else None
    detail = AcceptanceDetail(
        group=name,
        draft_loops=d,
        skipped_impossible_strata=tuple(skipped),
        min_samples=ctx.min_samples,
        strata_count=len(results),
        strata=tuple(per),
        decision="exact binomial per stratum, Bonferroni over the strata",
        rejected=comb.k,
        observed_rejection_rate=comb.k / comb.n if comb.n else None,
        expected_rejection_rate=expected_rate,
        # The first-position acceptance ratio and its exact value (1 - TV averaged
        # over the tested strata): what the report's acceptance figure plots.
        acceptance_ratio=1 - comb.k / comb.n if comb.n else None,
        expected_acceptance_ratio=None if expected_rate is None else 1 - expected_rate,
        mean_accepted_per_drafted=accepted / drafted if drafted else None,
        mean_drafted=whole.mean("drafted"),
        mean_accepted=whole.mean("accepted"),
    )
    method = (
        "exact binomial"
        if len(results) == 1
        else f"exact binomial, Bonferroni over {len(results)} strata"
    )
    row = ctx.row(spec, detail.observed_rejection_rate, None, comb.pvalue, comb.n, detail, method)
    keys = tuple(((("t1", e.t1),)) for e in per)
    return row, Coverage(len(per), keys, comb.n, g.n)


def joint(ctx: Context, spec: dict):
    if not ctx.ref.draft_law:
        return not_applicable_row(ctx, spec, NOT_APPLICABLE_NO_Q), None
    name, d, _, g = _speculative(ctx, spec)
    tested, skipped = first_position_strata(ctx, d, g)
    results, per = joint_strata(ctx, g, tested)
    head = {
        "group": name,
        "draft_loops": d,
        "skipped_impossible_strata": skipped,
        "cells": "acc:x ~ min(p, q)(x), rej:x ~ (p - q)+(x), x over supp p U supp q",
    }
    return stratified_row(ctx, spec, head, results, per, g.n)


def joint_strata(ctx, g: Cells, tested, gof=pearson_gof) -> tuple[list, list]:
    """Per tested stratum (t1, p, q): the joint-cell test and its record. ``gof`` is the
    per-stratum test."""
    results, per = [], []
    for t1, p, q in tested:
        s = g.take(g.t1 == t1)
        # Cells: supp p U supp q U observed (an observed token outside both has probability 0).
        tokens = np.union1d(np.union1d(p[0], q[0]), s.t2)
        pp, qq = dense_on(tokens, *p), dense_on(tokens, *q)
        probs = joint_cells(pp, qq)
        counts = joint_counts(s, tokens)
        res = gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        labels = [f"acc:{t}" for t in tokens.tolist()] + [f"rej:{t}" for t in tokens.tolist()]
        tv = total_variation(pp, qq)
        per.append(gof_stratum(res, tokens, counts, probs, labels=labels, t1=int(t1), tv=tv))
    return results, per


def joint_counts(s: Cells, tokens: np.ndarray) -> np.ndarray:
    """Counts [2C] of the joint cells (accepted, t2) then (rejected, t2) over ``tokens``."""
    cell = np.searchsorted(tokens, s.t2) + np.where(s.first_accepted == 1, 0, tokens.size)
    return s.counts_on(np.arange(2 * tokens.size), cell)


def _speculative(ctx: Context, spec: dict) -> tuple[str, int, GroupTally, Cells]:
    """The group's name, depth d, its tally, and the cells of samples with a first draft."""
    name = spec["groups"][0]
    d = ctx.plans[name].draft_loops if name in ctx.plans else None
    if d is None:
        raise ValueError(f"test {spec['name']!r} needs a speculative group, got {name!r}")
    whole = ctx.group(name)
    g = whole.cells
    return name, int(d), whole, g.take((g.first_accepted >= 0) & (g.t1 >= 0) & (g.t2 >= 0))


def first_position_strata(ctx, d: int, g: Cells):
    """([(t1, p, q), ...] for every stratum with at least min_samples samples,
    [{"t1": t1}, ...] for those the reference omits as impossible)."""
    keys, _ = g.strata(g.t1, ctx.min_samples)
    tested, skipped = [], []
    for t1 in keys:
        p = ctx.ref.law(ctx.ref.p2, int(t1), "p_t2")
        q = ctx.ref.law(ctx.ref.q2.get(d, {}), int(t1), f"q_t2[{d}]")
        if p is None or q is None:
            skipped.append({"t1": int(t1)})
        else:
            tested.append((t1, p, q))
    return tested, skipped
