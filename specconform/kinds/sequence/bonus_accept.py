"""``accept_after_bonus``: the first accept decision of the round after a bonus token,
against the bonus token's mid-PIT (specconform/stats/bonus_accept.py).

The pairs: a random request's bonus token b (the last token of a round that accepted
every draft) and the next committed token, when it sits at draft position 0 of the
next round (accepted or correction) and has its TV. A correct engine draws that
round's first coin from a uniform of its own, so A − (1 − TV) has mean 0 given the
prefix, bonus included; z of Σ g (A − (1 − TV)), g the bonus's mid-PIT − 1/2. The bug
class it targets: overlapping random streams, where the bonus's uniform is also the
next round's first coin (the engine's planted ``rng_bonus_overlaps_next_round``): it
acts only after an all-accepted round and only through that accept decision, whose
coin it confines to the bonus's CDF cell -- what the marginal PIT and the pair tables
of U's do not see (docs/kill-matrix.md). Evidence needs MIN_PAIRS pairs and at least
MIN_EXPECTED expected acceptances and rejections (the acceptance cells' rule).
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import BonusAcceptDetail
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats.bonus_accept import bonus_accept_test

from .context import MIN_EXPECTED, Context
from .records import ACCEPTED, BONUS, CORRECTION, Tokens

MIN_PAIRS = 50  # with |g| <= 1/2 and E, n - E >= 5 the normal z is close (calibration.md)


def bonus_pairs(tok: Tokens, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bonus, next) token indices: a selected bonus followed, in the same request at
    the next step, by a selected token at draft position 0 with a finite TV."""
    i = np.arange(tok.u.size - 1)
    nxt = i + 1
    ok = (
        selected[i]
        & selected[nxt]
        & (tok.kind[i] == BONUS)
        & (tok.group[i] == tok.group[nxt])
        & (tok.request[i] == tok.request[nxt])
        & (tok.step[nxt] == tok.step[i] + 1)
        & (tok.position[nxt] == 0)
        & ((tok.kind[nxt] == ACCEPTED) | (tok.kind[nxt] == CORRECTION))
        & np.isfinite(tok.tv[nxt])
    )
    return i[ok], nxt[ok]


def accept_after_bonus(ctx: Context, spec: dict) -> tuple[TestRow, CoverageRecord]:
    groups = ctx.groups_of(spec)
    tok = ctx.tokens
    b, x = bonus_pairs(tok, ctx.in_groups(groups) & tok.random)
    res = bonus_accept_test(tok.mid[b] - 0.5, tok.kind[x] == ACCEPTED, 1.0 - tok.tv[x])
    per = {name: int(np.isin(tok.group[b], [tok.groups.index(name)]).sum()) for name in groups}
    detail = BonusAcceptDetail(
        groups=tuple(groups),
        n=res.n,
        per_group=per,
        accepted=res.accepted,
        expected_accepted=res.expected_accepted,
        sum_weighted=res.sum_weighted,
        variance=res.variance,
        z=json_number(res.z),
        min_pairs=MIN_PAIRS,
        min_expected=MIN_EXPECTED,
        statistic_text="z^2, z = S / sqrt(V), S = sum g (A - (1 - TV)), "
        "V = sum g^2 TV (1 - TV), g = the bonus's mid-PIT - 1/2, A = the next round's "
        "first draft accepted",
    )
    method = "normal z (martingale), two-sided"
    rejections = res.n - res.expected_accepted
    if res.n < MIN_PAIRS or res.z is None:
        row = ctx.row(
            spec, None, 0, None, 0, detail, method, f"{res.n} pairs: fewer than {MIN_PAIRS}"
        )
    elif res.expected_accepted < MIN_EXPECTED or rejections < MIN_EXPECTED:
        why = (
            f"expected acceptances {res.expected_accepted:.3g} and rejections "
            f"{rejections:.3g} of {res.n} pairs: one is below {MIN_EXPECTED:g}"
        )
        row = ctx.row(spec, None, 0, None, 0, detail, method, why)
    else:
        row = ctx.row(spec, res.statistic, 1, res.pvalue, res.n, detail, method)
    return row, CoverageRecord(strata=1 if row.df else 0, n_covered=res.n, n_eligible=res.n)
