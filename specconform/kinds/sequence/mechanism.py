"""``mechanism_pit`` and ``mechanism_mean``: the PIT of each drafted token under its
conditional law given the accept decision (docs/sequence.md; the laws in
specconform/stats/mechanism.py).

A correction at draft position j has law r = (p_j - q_j)+ / TV given the rejection, an
accepted draft a = min(p_j, q_j) / (1 - TV) given the acceptance; the decision is known
before the committed token is drawn (the decomposition "decision, then token" has the
exact joint law), so the M_t = mech_cdf_below + W_t * mech_p_token of corrections (and
of accepted drafts) are i.i.d. Uniform(0, 1) given the past under the null, and any
predictable selection of them is too. Strata: law x draft position j x round band,
pooled like pit_uniformity's (:func:`.strata.uniformity_strata`), χ² of M on
equiprobable bins per stratum, summed over strata, laws and groups.

This does not stratify the *marginal* PIT by accepted vs corrected (which would be
wrong: against p, the kind is decided together with the token); it tests each kind
against the law *that kind* has.

``mechanism_mean`` is the low-df companion: per group, the mean of every tested M of the
law (default: corrections) against 1/2, z² ~ χ²(1), summed over groups. It is the
pre-registered statistic for *reused randomness*: when the accept coin u is reused to
draw the correction, a rejection (u ≥ p(x)/q(x)) leaves u in the upper part of [0, 1),
and an inverse-CDF draw from r lands high in r's CDF -- a shift of M that the χ² sum of
``mechanism_pit`` spreads over ~100 df.
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import (
    LawCounts,
    MeanGroup,
    MechanismMeanDetail,
    MechanismPitDetail,
)
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats import sum_chi2
from specconform.stats.pit import mean_test, uniformity

from .context import Context
from .raw import MECH_COLUMNS
from .records import ACCEPTED, CORRECTION
from .strata import uniformity_strata, uniformity_stratum

LAWS = {"correction": CORRECTION, "accepted": ACCEPTED}
LAW_TEXT = {
    "correction": "r = (p - q)+ / TV given the rejection",
    "accepted": "a = min(p, q) / (1 - TV) given the acceptance",
}
PREDATES = f"archive predates the column(s) {', '.join(MECH_COLUMNS)}"


def _law_names(spec: dict, default: str) -> list[str]:
    law = spec.get("law") or default
    return ["correction", "accepted"] if law == "both" else [law]


def _tested(ctx: Context, group: str, law: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens of the group and law in a random request, those with a PIT): a NaN
    mech_p (boundary) compares False and is left out, as is a token without q."""
    tok = ctx.tokens
    of_law = ctx.in_groups([group]) & ~tok.greedy & (tok.kind == LAWS[law])
    return of_law, of_law & np.isfinite(tok.tv) & (tok.mech_p > 0)


def mechanism_pit(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    law_names = _law_names(spec, "both")
    bins = int(spec.get("bins") or ctx.bins)
    min_samples = int(spec.get("min_samples") or ctx.min_samples)
    tok = ctx.tokens
    results, per, untested = [], [], {}
    counts: list[LawCounts] = []
    for name in groups:
        for law in law_names:
            of_law, tested = _tested(ctx, name, law)
            with_q = of_law & np.isfinite(tok.tv)
            counts.append(
                LawCounts(
                    group=name,
                    law=law,
                    tokens=int(of_law.sum()),
                    without_q=int((of_law & ~np.isfinite(tok.tv)).sum()),
                    boundary=int((with_q & np.isnan(tok.mech_p)).sum()),
                    out_of_support=int((with_q & (tok.mech_p == 0)).sum()),
                    eligible=int(tested.sum()),
                )
            )
            strata, left = uniformity_strata(tok, tested, ctx.round_bands, min_samples)
            if left:
                untested[f"{name}/{law}"] = left
            for s in strata:
                res = uniformity(tok.mech_u[s.members], bins)
                results.append(res)
                per.append(uniformity_stratum(res, s, ctx.round_bands, group=name, law=law))
    agg = sum_chi2(results)
    detail = MechanismPitDetail(
        groups=tuple(groups),
        laws={law: LAW_TEXT[law] for law in law_names},
        bins=bins,
        min_samples=min_samples,
        round_bands=tuple(ctx.round_bands),
        strata_count=agg.strata,
        strata=tuple(per),
        counts=tuple(counts),
        untested_slots=untested,
        statistic_text="Pearson chi2 of the mechanism PIT on equiprobable bins, summed "
        "over strata (law x draft position x round band) and groups",
    )
    why = None if tok.has_mech else PREDATES
    if why is not None:
        row = ctx.row(spec, None, 0, None, 0, detail, "chi2 summed over strata", why)
    else:
        row = ctx.row(
            spec, agg.statistic, agg.df, agg.pvalue, agg.n, detail, "chi2 summed over strata"
        )
    eligible = sum(c.eligible for c in counts)
    return row, CoverageRecord(strata=agg.strata, n_covered=agg.n, n_eligible=eligible)


def mechanism_mean(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    """Per group (and law): z of the mean M against 1/2 over every tested token, once
    the group has min_samples of them; the statistic Σ z² on as many df as groups
    tested (independent requests per group; groups on disjoint seeds)."""
    from scipy.stats import chi2

    groups = ctx.groups_of(spec)
    law_names = _law_names(spec, "correction")
    min_samples = int(spec.get("min_samples") or ctx.min_samples)
    per, eligible, statistic, df, n = [], 0, 0.0, 0, 0
    for name in groups:
        for law in law_names:
            _, tested = _tested(ctx, name, law)
            res = mean_test(ctx.tokens.mech_u[tested])
            eligible += res.n
            used = res.n >= min_samples
            if used:
                statistic, df, n = statistic + res.z**2, df + 1, n + res.n
            per.append(
                MeanGroup(
                    group=name,
                    law=law,
                    n=res.n,
                    mean=json_number(res.mean),
                    z=json_number(res.z),
                    pvalue=json_number(res.pvalue),
                    tested=used,
                )
            )
    detail = MechanismMeanDetail(
        groups=tuple(groups),
        laws={law: LAW_TEXT[law] for law in law_names},
        min_samples=min_samples,
        per_group=tuple(per),
        statistic_text="sum over groups of z^2, z = (sum M - n/2) / sqrt(n/12): the "
        "mean of the mechanism PIT against 1/2",
    )
    method = "chi2 of summed z^2"
    if not ctx.tokens.has_mech:
        row = ctx.row(spec, None, 0, None, 0, detail, method, PREDATES)
    elif df == 0:
        why = f"no group has {min_samples} tokens of the law"
        row = ctx.row(spec, None, 0, None, 0, detail, method, why)
    else:
        pvalue = float(chi2.sf(statistic, df))
        row = ctx.row(spec, float(statistic), df, pvalue, n, detail, method)
    return row, CoverageRecord(strata=df, n_covered=n, n_eligible=eligible)
