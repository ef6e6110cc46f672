"""``mechanism_pit``: the PIT of each drafted token under its conditional law given the
accept decision (docs/sequence.md; the laws in specconform/stats/mechanism.py).

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
"""

from __future__ import annotations

import numpy as np

from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats import sum_chi2
from specconform.stats.pit import uniformity

from .context import Context
from .raw import MECH_COLUMNS
from .records import ACCEPTED, CORRECTION
from .strata import uniformity_strata

LAWS = {"correction": CORRECTION, "accepted": ACCEPTED}
LAW_TEXT = {
    "correction": "r = (p - q)+ / TV given the rejection",
    "accepted": "a = min(p, q) / (1 - TV) given the acceptance",
}
PREDATES = f"archive predates the column(s) {', '.join(MECH_COLUMNS)}"


def mechanism_pit(ctx: Context, spec: dict) -> tuple[TestRow, dict]:
    groups = ctx.groups_of(spec)
    law_names = ["correction", "accepted"] if spec.get("law") in (None, "both") else [spec["law"]]
    bins = int(spec.get("bins") or ctx.bins)
    min_samples = int(spec.get("min_samples") or ctx.min_samples)
    tok = ctx.tokens
    results, per, untested = [], [], {}
    counts: list[dict[str, int | str]] = []
    for name in groups:
        in_group = ctx.in_groups([name]) & ~tok.greedy
        for law in law_names:
            of_law = in_group & (tok.kind == LAWS[law])
            with_q = of_law & np.isfinite(tok.tv)
            tested = with_q & (tok.mech_p > 0)  # NaN compares False: boundary left out
            counts.append(
                {
                    "group": name,
                    "law": law,
                    "tokens": int(of_law.sum()),
                    "without_q": int((of_law & ~np.isfinite(tok.tv)).sum()),
                    "boundary": int((with_q & np.isnan(tok.mech_p)).sum()),
                    "out_of_support": int((with_q & (tok.mech_p == 0)).sum()),
                    "eligible": int(tested.sum()),
                }
            )
            strata, left = uniformity_strata(tok, tested, ctx.round_bands, min_samples)
            if left:
                untested[f"{name}/{law}"] = left
            for s in strata:
                res = uniformity(tok.mech_u[s.members], bins)
                results.append(res)
                per.append(
                    {
                        "group": name,
                        "law": law,
                        **s.label(ctx.round_bands),
                        "n": res.n,
                        "statistic": json_number(res.statistic),
                        "df": res.df,
                        "pvalue": json_number(res.pvalue),
                        "observed": list(res.observed),
                        "expected": [res.expected] * len(res.observed),
                        "ks_statistic": res.ks_statistic,
                        "ks_pvalue": res.ks_pvalue,
                    }
                )
    agg = sum_chi2(results)
    detail = {
        "groups": groups,
        "laws": {law: LAW_TEXT[law] for law in law_names},
        "bins": bins,
        "min_samples": min_samples,
        "round_bands": ctx.round_bands,
        "strata_count": agg.strata,
        "strata": per,
        "counts": counts,
        "untested_slots": untested,
        "statistic_text": "Pearson chi2 of the mechanism PIT on equiprobable bins, summed "
        "over strata (law x draft position x round band) and groups",
    }
    why = None if tok.has_mech else PREDATES
    if why is not None:
        row = ctx.row(spec, None, 0, None, 0, detail, "chi2 summed over strata", why)
    else:
        row = ctx.row(
            spec, agg.statistic, agg.df, agg.pvalue, agg.n, detail, "chi2 summed over strata"
        )
    eligible = sum(int(c["eligible"]) for c in counts)
    return row, {"strata": agg.strata, "n_covered": agg.n, "n_eligible": eligible}
