"""The stochastic tests of a sequence protocol: PIT uniformity per stratum, PIT
independence of pairs, acceptance at every drafted position, and the mechanism PIT
(:mod:`.mechanism`) (docs/sequence.md).

Only *random* tokens enter the U statistics: tokens of non-greedy requests with
p_token > 0. A greedy request's reference law is one-hot, so its U is just V -- no
information, and it would dilute the power -- and an out-of-support token is fatal on
its own row (:func:`.checks.support_row`).
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import (
    AcceptanceAllDetail,
    AcceptanceGroup,
    IndependenceDetail,
    PairStratum,
    PositionCell,
    UniformityDetail,
)
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats import sum_chi2
from specconform.stats.pit import acceptance_counts, pair_independence, uniformity

from .bonus_accept import accept_after_bonus
from .context import MIN_EXPECTED, PAIR_GRID, Context
from .correlation import pit_correlation
from .crossing import crossing_count
from .mechanism import mechanism_mean, mechanism_pit
from .records import ACCEPTED, CORRECTION
from .strata import PAIR_TEXT, PAIRS, uniformity_strata, uniformity_stratum


def pit_uniformity(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    results, per, untested, covered, eligible = [], [], {}, 0, 0
    for name in groups:
        selected = ctx.in_groups([name]) & tok.random
        eligible += int(selected.sum())
        strata, left = uniformity_strata(tok, selected, ctx.round_bands, ctx.min_samples)
        if left:
            untested[name] = left
        for s in strata:
            res = uniformity(tok.u[s.members], ctx.bins)
            results.append(res)
            covered += res.n
            per.append(uniformity_stratum(res, s, ctx.round_bands, group=name))
    agg = sum_chi2(results)
    detail = UniformityDetail(
        groups=tuple(groups),
        bins=ctx.bins,
        min_samples=ctx.min_samples,
        round_bands=tuple(ctx.round_bands),
        strata_count=agg.strata,
        strata=tuple(per),
        untested_slots=untested,
        n_covered=covered,
        n_eligible=eligible,
        statistic_text="Pearson chi2 of U on equiprobable bins, summed over strata",
    )
    row = ctx.row(spec, agg.statistic, agg.df, agg.pvalue, agg.n, detail, "chi2 summed over strata")
    share = covered / eligible if eligible else 0.0
    return row, CoverageRecord(
        strata=agg.strata, n_covered=covered, n_eligible=eligible, share=share
    )


def pit_independence(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    kind = spec["pairs"]
    results, per = [], []
    for name in groups:
        first, second = PAIRS[kind](tok, ctx.in_groups([name]) & tok.random)
        res = pair_independence(tok.u[first], tok.u[second], PAIR_GRID, min_expected=MIN_EXPECTED)
        results.append(res)
        per.append(
            PairStratum(
                group=name,
                n=res.n,
                statistic=json_number(res.statistic),
                df=res.df,
                pvalue=json_number(res.pvalue),
                observed=tuple(tuple(r) for r in res.observed),
                rows_tested=tuple(res.rows_tested),
            )
        )
    agg = sum_chi2(results)
    detail = IndependenceDetail(
        groups=tuple(groups),
        pairs=kind,
        pair=PAIR_TEXT[kind],
        grid=PAIR_GRID,
        min_expected=MIN_EXPECTED,
        strata_count=agg.strata,
        strata=tuple(per),
        statistic_text="Pearson chi2 of the second U's bin within each bin of the first "
        "U (g - 1 df per row), summed over rows and groups",
    )
    row = ctx.row(
        spec, agg.statistic, agg.df, agg.pvalue, agg.n, detail, "chi2 summed over rows and groups"
    )
    return row, CoverageRecord(strata=agg.strata, n_covered=agg.n, n_eligible=agg.n)


def acceptance_all(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    results, per = [], []
    drafted = (tok.kind == ACCEPTED) | (tok.kind == CORRECTION)
    for name in groups:
        sel = ctx.in_groups([name]) & drafted & np.isfinite(tok.tv)
        res = acceptance_counts(
            tok.position[sel], tok.kind[sel] == CORRECTION, tok.tv[sel], min_expected=MIN_EXPECTED
        )
        results.append(res)
        # Key by key on purpose (alike in shape to other records built from a result):
        # the record's keys are the archive's, and some are converted (json_number).
        per.append(
            AcceptanceGroup(
                group=name,
                n=res.n,
                rejected=res.rejected,
                expected_rejections=res.expected,
                variance=res.variance,
                statistic=json_number(res.statistic),
                df=res.df,
                pvalue=json_number(res.pvalue),
                total_z=json_number(res.total_z),
                total_pvalue=json_number(res.total_pvalue),
                without_tv=int((ctx.in_groups([name]) & drafted & ~np.isfinite(tok.tv)).sum()),
                positions=tuple(
                    PositionCell(
                        positions=tuple(c.positions),
                        n=c.n,
                        rejected=c.rejected,
                        expected=c.expected,
                        variance=c.variance,
                        z=json_number(c.z),
                        observed_rejection_rate=c.rejected / c.n if c.n else None,
                        expected_rejection_rate=c.expected / c.n if c.n else None,
                    )
                    for c in res.cells
                ),
            )
        )
    agg = sum_chi2(results)
    n = sum(r.n for r in results)
    rejected = sum(r.rejected for r in results)
    expected = sum(r.expected for r in results)
    detail = AcceptanceAllDetail(
        groups=tuple(groups),
        min_expected=MIN_EXPECTED,
        strata_count=agg.strata,
        strata=tuple(per),
        rejected=rejected,
        expected_rejections=expected,
        observed_rejection_rate=rejected / n if n else None,
        expected_rejection_rate=expected / n if n else None,
        statistic_text="sum over drafted-position cells of z^2, "
        "z = (rejections - sum TV) / sqrt(sum TV (1 - TV))",
    )
    row = ctx.row(
        spec, agg.statistic, agg.df, agg.pvalue, n, detail, "chi2 of per-position z, summed"
    )
    return row, CoverageRecord(strata=agg.strata, n_covered=n, n_eligible=n)


TESTS = {
    "pit_uniformity": pit_uniformity,
    "pit_independence": pit_independence,
    "pit_correlation": pit_correlation,
    "acceptance_all": acceptance_all,
    "mechanism_pit": mechanism_pit,
    "mechanism_mean": mechanism_mean,
    "crossing_count": crossing_count,
    "accept_after_bonus": accept_after_bonus,
}
