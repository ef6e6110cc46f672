"""Rows a distribution protocol adds to its tests, and the per-stratum detail records.

- ``coverage`` (exploratory): the smallest share of eligible samples the strata of any
  stratified test cover;
- ``out_of_support`` (deterministic, primary): any observation of reference probability
  0 fails;
- ``engine_errors`` (deterministic, primary): requests whose finish_reason is "error",
  per group and per batch of the protocol's batch plan; more than the pre-registered
  ``engine_errors.tolerance`` (default 0) in any deciding group fails the verdict with
  the reason "engine errors" (distinct from a distribution failure).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.details.distribution import (
    CoverageDetail,
    CoverageRecord,
    EngineErrorsDetail,
    GofStratum,
    NotApplicableDetail,
    StratifiedDetail,
    SupportCounts,
    SupportDetail,
)
from specconform.evidence.jsonio import json_number
from specconform.kinds.verdict import (
    ENGINE_ERRORS_METHOD,
    REASON_ENGINE_ERRORS,
    SUPPORT_METHOD,
    coverage_info_row,
    deterministic_row,
)
from specconform.results import NO_EVIDENCE, TestRow
from specconform.stats import sum_chi2

from .context import Context


@dataclass(frozen=True)
class Coverage:
    """What the strata of one stratified test cover."""

    strata: int
    keys: tuple[tuple[tuple[str, int], ...], ...]  # per stratum: (("t1", 5),) or t1, t2
    n_covered: int
    n_eligible: int

    @property
    def share(self) -> float:
        return self.n_covered / self.n_eligible if self.n_eligible else 0.0

    def record(self) -> CoverageRecord:
        return CoverageRecord(
            strata=self.strata,
            keys=tuple(dict(k) for k in self.keys),
            n_covered=self.n_covered,
            n_eligible=self.n_eligible,
            share=self.share,
        )


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


def stratified_row(
    ctx: Context, spec: dict, head: dict, results: list, per: list, eligible: int
) -> tuple[TestRow, Coverage]:
    """Strata's χ² summed into one row (df 0 or no stratum: no evidence)."""
    agg = sum_chi2(results)
    detail = StratifiedDetail(
        **head,
        min_samples=ctx.min_samples,
        min_expected=ctx.min_expected,
        strata_count=agg.strata,
        aggregate_df=agg.df,
        strata=tuple(per),
    )
    row = ctx.row(spec, agg.statistic, agg.df, agg.pvalue, agg.n, detail, "chi2 summed over strata")
    keys = tuple(
        tuple(
            (k, int(v)) for k, v in (("t1", e.t1), ("t2", getattr(e, "t2", None))) if v is not None
        )
        for e in per
    )
    return row, Coverage(len(per), keys, agg.n, int(eligible))


NOT_APPLICABLE_NO_Q = "not applicable: the adapter gives no draft law"


def not_applicable_row(ctx: Context, spec: dict, why: str) -> TestRow:
    """A test the engine cannot be asked (e.g. acceptance without q): no evidence with
    ``why`` as its reason, never a pass; a deciding one fails the verdict for that reason."""
    detail = NotApplicableDetail(group=spec["groups"][0], no_evidence=why)
    return TestRow(
        spec["name"],
        spec["role"],
        None,
        None,
        None,
        0,
        ctx.alpha,
        None if spec["role"] == "exploratory" else False,
        detail,
        status=NO_EVIDENCE,
        pvalue_method="none (not applicable)",
        reason=why,
    )


def coverage_row(ctx: Context, coverage: dict[str, Coverage]) -> TestRow:
    share = min((c.share for c in coverage.values()), default=1.0)
    n = sum(g.n for g in ctx.data.values())
    detail = CoverageDetail(
        statistic="smallest share of eligible samples covered by the strata of any stratified test",
        tests={name: c.record() for name, c in coverage.items()},
    )
    return coverage_info_row(share, n, ctx.alpha, detail)


def support_row(ctx: Context) -> TestRow:
    """Observations of zero reference probability at t1, t2 or t3, any group: one is fatal.

    A position is checked only when its prefix is possible (an impossible t1 is counted
    once, at t1); tokens outside [0, vocab_size) are always out of support.
    """
    ref, w, per, total, n = ctx.ref, ctx.width, {}, 0, 0
    for name, tally in sorted(ctx.data.items()):
        g = tally.cells  # each distinct row once: a mask's samples are its cells' counts
        (ok1, ok2, ok3), (bad1, bad2, bad3) = ref.unsupported(g.t1, g.t2, g.t3, w)
        c = g.count
        per[name] = SupportCounts(
            t1=int(c[bad1].sum()), t2=int(c[bad2].sum()), t3=int(c[bad3].sum())
        )
        total += per[name].t1 + per[name].t2 + per[name].t3
        n += int(c[ok1].sum() + c[ok2].sum() + c[ok3].sum())
    detail = SupportDetail(per_group=per, rule="any observation with reference probability 0 fails")
    ok = total == 0
    return deterministic_row(
        "out_of_support", float(total), n, ctx.alpha, ok, detail, SUPPORT_METHOD, "out of support"
    )


def engine_errors_row(ctx: Context, deciding_groups: set[str]) -> TestRow:
    """Requests that ended in an engine error, per group and per batch, against the
    pre-registered tolerance (errors allowed per deciding group)."""
    per_group, per_batch, recorded = {}, {}, True
    for name, g in sorted(ctx.data.items()):
        if g.error_seeds is None:
            recorded = False
            continue
        per_group[name] = int(g.error_seeds.size)
        plan = ctx.plans.get(name)
        if ctx.batch_size and plan is not None and plan.seed_start is not None:
            batch = (g.error_seeds - plan.seed_start) // ctx.batch_size
            idx, counts = np.unique(batch, return_counts=True)
            per_batch[name] = {str(int(i)): int(c) for i, c in zip(idx, counts, strict=True)}
    n = sum(g.n for g in ctx.data.values())
    deciding = sorted(deciding_groups & set(per_group))
    over = [gname for gname in deciding if per_group[gname] > ctx.error_tolerance]
    detail = EngineErrorsDetail(
        per_group=per_group,
        per_batch=per_batch,
        deciding_groups=tuple(deciding),
        tolerance=ctx.error_tolerance,
        batch="(seed - group's first seed) // batch_size",
        over_tolerance=tuple(over),
        rule="FAIL if a group read by a deciding test has more engine errors than the tolerance",
    )
    method = ENGINE_ERRORS_METHOD
    if not recorded:
        detail = detail.replace(
            no_evidence="samples carry no finish_reason: engine errors not counted"
        )
        return TestRow(
            "engine_errors",
            "primary",
            None,
            None,
            None,
            n,
            ctx.alpha,
            False,
            detail,
            status=NO_EVIDENCE,
            pvalue_method=method,
            reason="no evidence",
        )
    return deterministic_row(
        "engine_errors",
        float(sum(per_group.values())),
        n,
        ctx.alpha,
        not over,
        detail,
        method,
        REASON_ENGINE_ERRORS,
    )
