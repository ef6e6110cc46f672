"""The fixed-N evaluation of a distribution protocol: every pre-registered test, the
coverage, out-of-support and engine-error rows, and the family-wise verdict.

Its own module so that the sequential evaluation (:mod:`.sequential`), which reports
these rows as information beside its e-process, and the dispatcher (:mod:`.evaluate`)
both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping

from specconform.kinds.verdict import family_verdict
from specconform.results import Evaluation
from specconform.stats.reference import Reference

from . import mechanism, score, tokens
from .context import Context
from .rows import coverage_row, engine_errors_row, support_row
from .tally import GroupTally

TESTS = {
    "t1_gof": tokens.t1_gof,
    "t2_gof": tokens.t2_gof,
    "t2_homogeneity": tokens.t2_homogeneity,
    "t3_gof": tokens.t3_gof,
    "acceptance": mechanism.acceptance,
    "joint": mechanism.joint,
    "joint_score": score.joint_score,
}


def evaluate_fixed(protocol: dict, data: Mapping[str, GroupTally], ref: Reference) -> Evaluation:
    """Every test of ``protocol`` at the run's fixed size, and the family-wise verdict,
    from the samples' per-group tallies (:mod:`.tally`)."""
    ctx = Context.build(protocol, data, ref)
    rows, coverage = [], {}
    for spec in protocol["tests"]:
        row, cov = TESTS[spec["type"]](ctx, spec)
        rows.append(row)
        if cov is not None:
            coverage[spec["name"]] = cov
    deciding_groups = {
        g for spec in protocol["tests"] if spec["role"] in ctx.rule.roles for g in spec["groups"]
    }
    rows += [coverage_row(ctx, coverage), support_row(ctx), engine_errors_row(ctx, deciding_groups)]
    decided, verdict = family_verdict(rows, ctx.rule)
    return Evaluation(decided, verdict)
