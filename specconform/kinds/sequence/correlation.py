"""``pit_correlation``: paired U's against zero correlation, one degree of freedom.

The pairs are ``pit_independence``'s (``pairs``: lag1, rounds, requests,
request_rounds: :mod:`.strata`), the statistic z = S / √(n / 144) with
S = Σ (U_a − 1/2)(U_b − 1/2) summed over the test's groups
(:func:`specconform.stats.pit.pair_correlation`). The bug class it targets: randomness
shared or reused between the two members of a pair, which moves both U's the same way.
The randomized PIT's V_t spreads a high-probability token's U over its whole cell, so
a shared uniform shows as a modest correlation; a g × g table spends 12 degrees of
freedom on it, this test one. Fewer than MIN_PAIRS pairs in all: no evidence.
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import CorrelationDetail, CorrelationGroup
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats.pit import pair_correlation

from .context import Context
from .strata import PAIR_TEXT, PAIRS

MIN_PAIRS = 50  # the normal law of a sum of 50 products of centred uniforms is close


def pit_correlation(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    kind = spec["pairs"]
    firsts, seconds, per = [], [], []
    for name in groups:
        first, second = PAIRS[kind](tok, ctx.in_groups([name]) & tok.random)
        part = pair_correlation(tok.u[first], tok.u[second], min_pairs=0)
        per.append(CorrelationGroup(group=name, n=part.n, sum_products=part.sum_products))
        firsts.append(tok.u[first])
        seconds.append(tok.u[second])
    res = pair_correlation(np.concatenate(firsts), np.concatenate(seconds), min_pairs=MIN_PAIRS)
    detail = CorrelationDetail(
        groups=tuple(groups),
        pairs=kind,
        pair=PAIR_TEXT[kind],
        min_pairs=MIN_PAIRS,
        per_group=tuple(per),
        z=json_number(res.z) if res.df else None,
        statistic_text="z^2, z = S / sqrt(n / 144), S = sum over pairs of "
        "(U_a - 1/2)(U_b - 1/2), pooled over the groups",
    )
    why = None if res.df else f"{res.n} pairs: fewer than {MIN_PAIRS}"
    row = ctx.row(
        spec,
        res.statistic if res.df else None,
        res.df,
        res.pvalue if res.df else None,
        res.n if res.df else 0,
        detail,
        "normal z of the centred products, two-sided",
        why,
    )
    return row, CoverageRecord(strata=len(groups), n_covered=res.n, n_eligible=res.n)
