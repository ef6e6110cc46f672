"""``joint_score``: a score test on the joint (accept/reject, t2) cells of a speculative
group along pre-registered bug-class directions (specconform.stats.mutant_laws.
SCORE_DIRECTIONS), every t1 stratum included, Monte Carlo p-value under the exact null
(specconform.stats.score).

Why: the omnibus joint and t2 tests spread a bug's effect over tens of df and test only
strata of min_samples; a bug class whose direction is known from p and q is seen at the
most powerful test's noncentrality on a few df, from the first seeds. Bugs outside the
span of the directions are left to the omnibus tests, which keep their roles.
"""

from __future__ import annotations

import zlib

import numpy as np

from specconform.details.distribution import ScoreDetail, ScoreStratumRecord
from specconform.evidence.jsonio import json_number
from specconform.kinds.verdict import FamilyRule
from specconform.stats.cells import dense_on
from specconform.stats.mutant_laws import score_directions
from specconform.stats.score import ScoreStratum, replications_for, score_test
from specconform.stats.speculative import joint_cells

from .context import DECIDING_ROLES, Context, family_size
from .mechanism import _speculative, joint_counts
from .rows import Coverage


def mc_seed(test_name: str, cells: list[ScoreStratum]) -> list[int]:
    """The Monte Carlo generator's seed: the test's name and a digest of its observed
    counts. Deterministic (a verifier recomputes the same p-value), yet a fresh Monte Carlo
    sample for every data set: with one fixed sample the test's size would be that
    sample's own tail quantile (off α by its sampling error, the same way in every run)
    instead of α on average."""
    digest = zlib.crc32(
        b"".join(np.ascontiguousarray(c.counts, dtype=np.int64).tobytes() for c in cells)
    )
    return [zlib.crc32(test_name.encode()), digest]


def score_draws(protocol: dict) -> int:
    """The Monte Carlo draws of the protocol's joint_score tests (they follow its family
    level: stats.score.replications_for)."""
    rule = FamilyRule.from_protocol(protocol, DECIDING_ROLES)
    return replications_for(rule.level, family_size(protocol, rule))


def joint_score(ctx: Context, spec: dict):
    name, d, _, g = _speculative(ctx, spec)
    keys, _ = g.strata(g.t1, 1)
    others = sorted(e for e in ctx.ref.q2 if e != d)
    per, cells, skipped = [], [], []
    names: tuple[str, ...] = ()
    for t1 in keys:
        p = ctx.ref.law(ctx.ref.p2, int(t1), "p_t2")
        q = ctx.ref.law(ctx.ref.q2.get(d, {}), int(t1), f"q_t2[{d}]")
        found = [ctx.ref.law(ctx.ref.q2[e], int(t1), f"q_t2[{e}]") for e in others]
        q_other = [o for o in found if o is not None]
        if p is None or q is None or len(q_other) < len(found):
            skipped.append({"t1": int(t1)})
            continue
        s = g.take(g.t1 == t1)
        tokens = np.union1d(np.union1d(p[0], q[0]), s.t2)
        for o in q_other:
            tokens = np.union1d(tokens, o[0])
        pp, qq = dense_on(tokens, *p), dense_on(tokens, *q)
        names, dirs = score_directions(pp, qq, [dense_on(tokens, *o) for o in q_other])
        cells.append(ScoreStratum(joint_counts(s, tokens), joint_cells(pp, qq), dirs))
        per.append(ScoreStratumRecord(t1=int(t1), n=s.n))
    seed = mc_seed(spec["name"], cells)
    draws = replications_for(ctx.rule.level, ctx.family_size)
    res = score_test(cells, replications=draws, seed=seed)
    detail = ScoreDetail(
        group=name,
        draft_loops=d,
        directions=tuple(names),
        score=tuple(json_number(s) for s in res.score),
        statistic="score S^T V+ S on the joint cells along the directions",
        df=res.df,
        asymptotic_pvalue=json_number(res.asymptotic_pvalue),
        mc_replications=res.replications,
        mc_seed=tuple(seed),
        out_of_support=res.out_of_support,
        skipped_impossible_strata=tuple(skipped),
        strata_count=len(per),
        strata=tuple(per),
    )
    method = f"Monte Carlo under the exact null ({res.replications} draws), score test"
    row = ctx.row(spec, res.statistic, res.df, res.pvalue, res.n, detail, method)
    cov_keys = tuple(((("t1", e.t1),)) for e in per)
    return row, Coverage(len(per), cov_keys, res.n, g.n)
