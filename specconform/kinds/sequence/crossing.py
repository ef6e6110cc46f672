"""``crossing_count``: the committed top-p crossing tokens against their expected number.

At every committed token of a top-p request (0 < top_p < 1, T > 0) whose reference law
keeps at least two tokens, the runner records p_t(c_t) of the law's crossing token c_t
and whether x_t = c_t (raw.CROSS_COLUMNS; specconform/stats/crossing.py). A correct
engine commits c_t with probability p_t(c_t) at every step, so O = Σ hits has mean
E = Σ p_t(c_t) and variance V = Σ p_t(c_t)(1 − p_t(c_t)) (a martingale, the tokens of
one request being sequential); z = (O − E) / √V pooled over the test's groups; the
p-value is the two-sided Poisson-binomial tail of O given the p_t(c_t) (the normal z²
is liberal at these expected counts: specconform/stats/crossing.py). The bug class it targets: a top-p filter off by one (the crossing token dropped, or
one token too many kept), which moves little mass and so hides from the PIT χ².
Evidence needs E ≥ MIN_EXPECTED and n − E ≥ MIN_EXPECTED (the acceptance cells' rule).
``min_position`` (optional) keeps the tokens at round position ≥ it: 1 tests the
positions past the first draft position only, where a bug of the speculative path
alone acts and the distribution kind's first-position tests do not reach.
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import CrossingDetail
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats.crossing import crossing_test

from .context import MIN_EXPECTED, Context
from .raw import CROSS_COLUMNS

PREDATES_CROSS = f"archive predates the column(s) {', '.join(CROSS_COLUMNS)}"


def crossing_count(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    min_position = spec.get("min_position")
    in_groups = ctx.in_groups(groups)
    tested = in_groups & ~np.isnan(tok.cross_p)
    if min_position is not None:
        tested &= tok.position >= int(min_position)
    res = crossing_test(tok.cross_p[tested], tok.cross_hit[tested])
    detail = CrossingDetail(
        groups=tuple(groups),
        min_position=None if min_position is None else int(min_position),
        n=res.n,
        observed=res.observed,
        expected=res.expected,
        variance=res.variance,
        z=json_number(res.z),
        min_expected=MIN_EXPECTED,
        statistic_text="z^2, z = (O - E) / sqrt(V): O committed crossing tokens, "
        "E = sum p_t(c_t), V = sum p_t(c_t)(1 - p_t(c_t)), pooled over the groups",
    )
    method = "exact Poisson-binomial, two-sided"
    if not tok.has_cross:
        row = ctx.row(spec, None, 0, None, 0, detail, method, PREDATES_CROSS)
    elif res.expected < MIN_EXPECTED or res.n - res.expected < MIN_EXPECTED:
        why = (
            f"expected crossing count {res.expected:.3g} of {res.n} tokens: below {MIN_EXPECTED:g}"
        )
        row = ctx.row(spec, None, 0, None, 0, detail, method, why)
    else:
        row = ctx.row(spec, res.statistic, 1, res.pvalue, res.n, detail, method)
    eligible = int(in_groups.sum())
    return row, CoverageRecord(strata=1 if row.df else 0, n_covered=res.n, n_eligible=eligible)
