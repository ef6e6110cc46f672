"""The first results schema's distribution evaluator, frozen: it reproduces archives
written before family-wise verdicts (their protocol.json has no ``verdict``), so that
``verify`` still re-derives every stated row and verdict of such an archive exactly.

Do not change its output: new behaviour goes in :mod:`..evaluate`. It imports no live
evaluator module: the helpers it shared with the live evaluator are frozen copies in
:mod:`.frozen`. This package is a FROZEN copy, kept byte-for-byte so that old archives
re-verify with the rules they were made with: the duplicated lines between it (this
module and :mod:`.frozen`) and the live evaluator (``context``, ``rows``, ``tokens``,
``mechanism``, ``fixed``) are on purpose; never merge them. Schema-1 semantics it
keeps on purpose (each wrong for new runs, fixed there): every test decides at alpha on
its own (union bound only); df 0 reads p = 1 and PASS; acceptance decides on the summed
2-cell χ²; t1 over several groups shows the smallest-p group's statistic beside the
Bonferroni p; engine errors are not counted.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from specconform.details import Record
from specconform.details.distribution import CoverageDetail
from specconform.details.legacy import (
    LegacyAcceptanceDetail,
    LegacyGroupsGofDetail,
    LegacyStratifiedDetail,
)
from specconform.evidence.jsonio import json_number as _num
from specconform.results import Evaluation, RawData, TestRow, decide
from specconform.stats import bonferroni, sum_chi2
from specconform.stats import pearson_gof as _pearson_gof
from specconform.stats import pearson_homogeneity as _pearson_homogeneity
from specconform.stats.cells import align, on_union, strata
from specconform.stats.rate import rate_test as _rate_test
from specconform.stats.reference import Reference
from specconform.stats.speculative import total_variation

from .frozen import (
    GroupData,
    first_position_strata,
    gof_strata,
    gof_stratum,
    joint_strata,
    split,
    support_row,
)


def _p1(res):
    """Schema 1 read a df-0 test as p = 1 (the primitives now say NaN: no evidence)."""
    return replace(res, pvalue=1.0) if math.isnan(res.pvalue) else res


def pearson_gof(*args, **kwargs):
    return _p1(_pearson_gof(*args, **kwargs))


def pearson_homogeneity(*args, **kwargs):
    return _p1(_pearson_homogeneity(*args, **kwargs))


def rate_test(k, n, p0, *, min_expected):
    """Schema 1's rate record: the 2-cell χ² as statistic/df/pvalue, the exact p beside."""
    r = _rate_test(k, n, p0, min_expected=min_expected)
    return SimpleNamespace(
        statistic=r.chi2_statistic,
        df=r.chi2_df,
        pvalue=1.0 if math.isnan(r.chi2_pvalue) else r.chi2_pvalue,
        n=r.n,
        k=r.k,
        rate=r.rate,
        binom_pvalue=r.pvalue,
        pooled=r.pooled,
    )


DECIDING_ROLES = ("prerequisite", "primary")


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute every test and the verdict from a run's raw files."""
    return evaluate_frames(protocol, raw.csv("raw/samples.csv"), raw.json("raw/reference.json"))


def evaluate_frames(protocol: dict, samples, reference) -> Evaluation:
    """Same as :func:`evaluate` from in-memory data."""
    ref = reference if isinstance(reference, Reference) else Reference(reference)
    ctx = _Context(protocol, ref, split(samples, ref.vocab_size))
    rows, coverage = [], {}
    for spec in protocol["tests"]:
        row, cov = _RUNNERS[spec["type"]](ctx, spec)
        rows.append(row)
        if cov is not None:
            coverage[spec["name"]] = cov
    rows.append(_coverage_row(ctx, coverage))
    rows.append(support_row(ctx))  # same schema-1 fields as then
    alpha = ctx.alpha
    roles = tuple(protocol.get("decision_roles") or DECIDING_ROLES)
    rule = f"PASS iff every {' and '.join(roles)} test passes at alpha={alpha}"
    return Evaluation(tuple(rows), decide(rows, alpha, roles, rule))


# --- inputs --------------------------------------------------------------------------------


class _Context:
    def __init__(self, protocol: dict, ref: Reference, data: dict[str, GroupData]):
        self.alpha = float(protocol["alpha"])
        strata_rule = protocol.get("strata") or {}
        self.min_samples = int(strata_rule.get("min_samples", 200))
        self.min_expected = float(strata_rule.get("min_expected", 5.0))
        self.groups = {g["name"]: g for g in protocol["groups"]}
        self.ref = ref
        self.data = data
        # Base for int64 (t1, t2[, t3]) codes: tokens lie in [0, vocab_size] after _split.
        self.width = ref.vocab_size + 1

    def group(self, name: str) -> GroupData:
        if name not in self.groups:
            raise ValueError(f"test names unknown group {name!r}")
        return self.data.get(name, GroupData.empty())

    def row(self, spec: dict, statistic, df, pvalue, n: int, detail: Record) -> TestRow:
        role = spec["role"]
        if role == "exploratory":
            passed = None
        elif n == 0 or pvalue is None:
            # No stratum reached min_samples: there is no evidence, which is not a pass.
            passed = False
            detail = detail.replace(reason="no data reached the strata threshold")
        else:
            passed = bool(pvalue >= self.alpha)
        return TestRow(
            spec["name"], role, float(statistic), df, pvalue, int(n), self.alpha, passed, detail
        )


# --- tests ---------------------------------------------------------------------------------


def _t1_gof(ctx: _Context, spec: dict):
    """Each group's t1 against p_t1; several (seed-sharing) groups combined by Bonferroni."""
    results, per_group = [], []
    for name in spec["groups"]:
        t1 = ctx.group(name).t1
        t1 = t1[t1 >= 0]
        tokens, probs, counts = align(*ctx.ref.p1, t1)
        res = pearson_gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        per_group.append(gof_stratum(res, tokens, counts, probs, group=name))
    comb = bonferroni([r.pvalue for r in results])
    decider = results[comb.argmin]
    detail = LegacyGroupsGofDetail(
        groups=tuple(spec["groups"]),
        per_group=tuple(per_group),
        combination="single group"
        if comb.m == 1
        else f"Bonferroni over {comb.m} groups sharing seeds: p = min(1, m * min p_i); "
        "statistic and df are those of the group with the smallest p-value",
        deciding_group=spec["groups"][comb.argmin],
    )
    n = sum(r.n for r in results)
    return ctx.row(spec, decider.statistic, decider.df, comb.pvalue, n, detail), None


def _t2_gof(ctx: _Context, spec: dict):
    """t2 against p_t2[t1] per t1 stratum; strata summed."""
    return _stratified_gof(ctx, spec, depth=2)


def _t3_gof(ctx: _Context, spec: dict):
    """t3 against p_t3[t1, t2] per (t1, t2) stratum; strata summed."""
    return _stratified_gof(ctx, spec, depth=3)


def _stratified_gof(ctx: _Context, spec: dict, depth: int):
    name = spec["groups"][0]
    results, per, skipped, eligible = gof_strata(ctx, name, depth, gof=pearson_gof)
    head = {"group": name, "skipped_impossible_strata": skipped}
    return _stratified_row(ctx, spec, head, results, per, eligible)


def _t2_homogeneity(ctx: _Context, spec: dict):
    name_a, name_b = spec["groups"]
    a, b = ctx.group(name_a), ctx.group(name_b)
    a = a.take((a.t1 >= 0) & (a.t2 >= 0))
    b = b.take((b.t1 >= 0) & (b.t2 >= 0))
    overlap = np.intersect1d(a.seed, b.seed).size > 0
    if overlap:
        # Shared seeds can mean shared randomness; two-sample tests need independent
        # samples, so split by seed parity: disjoint seed sets by construction.
        a, b = a.take(a.seed % 2 == 0), b.take(b.seed % 2 == 1)
        split = (
            f"seed sets overlap: {name_a} uses its even seeds, {name_b} its odd "
            "seeds (disjoint seeds, independent samples)"
        )
    else:
        split = "seed sets disjoint: all samples of both groups"
    keys_a, _ = strata(a.t1, ctx.min_samples)
    keys_b, _ = strata(b.t1, ctx.min_samples)
    keys = np.intersect1d(keys_a, keys_b)
    results, per = [], []
    for t1 in keys:
        xa, xb = a.t2[a.t1 == t1], b.t2[b.t1 == t1]
        tokens = np.union1d(xa, xb)
        ca = np.bincount(np.searchsorted(tokens, xa), minlength=tokens.size)
        cb = np.bincount(np.searchsorted(tokens, xb), minlength=tokens.size)
        res = pearson_homogeneity(ca, cb, min_expected=ctx.min_expected)
        results.append(res)
        per.append(
            {
                "t1": int(t1),
                "n": res.n,
                "n_a": res.n_a,
                "n_b": res.n_b,
                "statistic": _num(res.statistic),
                "df": res.df,
                "pvalue": _num(res.pvalue),
                "cells": res.cells,
                "pooled": [int(tokens[i]) for i in res.pooled],
                "tokens": tokens.tolist(),
                "observed_a": ca.tolist(),
                "observed_b": cb.tolist(),
            }
        )
    head = {"groups": [name_a, name_b], "seed_split": split}
    eligible = a.t1.size + b.t1.size
    return _stratified_row(ctx, spec, head, results, per, eligible)


def _speculative(ctx: _Context, spec: dict):
    """The group's samples that had a draft at the first draft position, and its depth d."""
    name = spec["groups"][0]
    d = ctx.groups[name].get("draft_loops")
    if d is None:
        raise ValueError(f"test {spec['name']!r} needs a speculative group, got {name!r}")
    g = ctx.group(name)
    return name, int(d), g, g.take((g.first_accepted >= 0) & (g.t1 >= 0) & (g.t2 >= 0))


def _acceptance(ctx: _Context, spec: dict):
    """Rejection at the first draft position has probability exactly TV(p_t2[t1], q_t2[d][t1])."""
    name, d, whole, g = _speculative(ctx, spec)
    tested, skipped = first_position_strata(ctx, d, g)
    results, per = [], []
    for t1, p, q in tested:
        tv = total_variation(*on_union(*p, *q)[1:])
        fa = g.first_accepted[g.t1 == t1]
        res = rate_test(int((fa == 0).sum()), fa.size, tv, min_expected=ctx.min_expected)
        results.append(res)
        per.append(
            {
                "t1": int(t1),
                "n": res.n,
                "tv": tv,
                "rejected": res.k,
                "expected_rejection_rate": tv,
                "observed_rejection_rate": res.rate,
                "expected": [res.n * (1 - tv), res.n * tv],
                "observed": [res.n - res.k, res.k],
                "statistic": _num(res.statistic),
                "df": res.df,
                "pvalue": _num(res.pvalue),
                "binom_pvalue": res.binom_pvalue,
                "pooled": list(res.pooled),
            }
        )
    drafted, accepted = int(whole.drafted.clip(min=0).sum()), int(whole.accepted.clip(min=0).sum())
    head = {
        "group": name,
        "draft_loops": d,
        "skipped_impossible_strata": skipped,
        "mean_accepted_per_drafted": accepted / drafted if drafted else None,
        "mean_drafted": float(whole.drafted.mean()) if whole.drafted.size else None,
        "mean_accepted": float(whole.accepted.mean()) if whole.accepted.size else None,
        "aggregate": "sum of the strata's 2-cell Pearson chi2 and df; exact binomial "
        "p-values per stratum in 'strata'",
    }
    return _stratified_row(ctx, spec, head, results, per, g.t1.size)


def _joint(ctx: _Context, spec: dict):
    """Committed t2 split by first-position accept/reject against min(p, q) and (p - q)₊."""
    name, d, _, g = _speculative(ctx, spec)
    tested, skipped = first_position_strata(ctx, d, g)
    results, per = joint_strata(ctx, g, tested, gof=pearson_gof)
    head = {
        "group": name,
        "draft_loops": d,
        "skipped_impossible_strata": skipped,
        "cells": "acc:x ~ min(p, q)(x), rej:x ~ (p - q)+(x), x over supp p U supp q",
    }
    return _stratified_row(ctx, spec, head, results, per, g.t1.size)


_RUNNERS = {
    "t1_gof": _t1_gof,
    "t2_gof": _t2_gof,
    "t2_homogeneity": _t2_homogeneity,
    "t3_gof": _t3_gof,
    "acceptance": _acceptance,
    "joint": _joint,
}


# --- rows ----------------------------------------------------------------------------------


def _stratified_row(ctx: _Context, spec: dict, head: dict, results: list, per: list, eligible: int):
    agg = sum_chi2(results)
    if agg.strata and math.isnan(agg.pvalue):
        agg = replace(agg, pvalue=1.0)
    record = LegacyAcceptanceDetail if "aggregate" in head else LegacyStratifiedDetail
    detail = record(
        **head,
        min_samples=ctx.min_samples,
        min_expected=ctx.min_expected,
        strata_count=agg.strata,
        aggregate_df=agg.df,
        strata=tuple(per),
    )
    pvalue = _num(agg.pvalue) if agg.strata else None
    row = ctx.row(spec, agg.statistic, agg.df, pvalue, agg.n, detail)
    keys = [{k: v for k, v in e.to_json().items() if k in ("t1", "t2")} for e in detail.strata]
    cov = {
        "strata": len(per),
        "keys": keys,
        "n_covered": agg.n,
        "n_eligible": int(eligible),
        "share": agg.n / eligible if eligible else 0.0,
    }
    return row, cov


def _coverage_row(ctx: _Context, coverage: dict) -> TestRow:
    share = min((c["share"] for c in coverage.values()), default=1.0)
    n = sum(g.t1.size for g in ctx.data.values())
    detail = CoverageDetail(
        statistic="smallest share of eligible samples covered by the strata of any stratified test",
        tests=coverage,
    )
    return TestRow("coverage", "exploratory", float(share), None, None, n, ctx.alpha, None, detail)
