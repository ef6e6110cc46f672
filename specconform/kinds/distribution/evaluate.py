"""Evaluate a distribution protocol from its raw data: every pre-registered test, the
coverage, out-of-support and engine-error rows, and the family-wise verdict.

Raw data (written by the runner): ``raw/samples.csv`` (columns in :mod:`.context`) and
``raw/reference.json`` (:mod:`.reference`). Imports no torch: ``verify`` recomputes
verdicts on a laptop.
"""

from __future__ import annotations

from specconform.kinds.verdict import family_verdict
from specconform.results import Evaluation, RawData

from . import mechanism, score, tokens
from .context import Context
from .reference import Reference
from .rows import coverage_row, engine_errors_row, support_row

TESTS = {
    "t1_gof": tokens.t1_gof,
    "t2_gof": tokens.t2_gof,
    "t2_homogeneity": tokens.t2_homogeneity,
    "t3_gof": tokens.t3_gof,
    "acceptance": mechanism.acceptance,
    "joint": mechanism.joint,
    "joint_score": score.joint_score,
}


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute every test and the verdict from a run's raw files."""
    return evaluate_frames(protocol, raw.csv("raw/samples.csv"), raw.json("raw/reference.json"))


def evaluate_frames(protocol: dict, samples, reference: dict | Reference) -> Evaluation:
    """Same as :func:`evaluate` from in-memory data: ``samples`` a pandas DataFrame with the
    columns of samples.csv, ``reference`` the dict of reference.json or a parsed
    :class:`Reference` (which calibration reuses across replications)."""
    ref = reference if isinstance(reference, Reference) else Reference(reference)
    if protocol.get("sequential"):  # anytime-valid mode: the e-process decides
        from .sequential import evaluate_sequential

        return evaluate_sequential(protocol, samples, ref)
    ctx = Context.build(protocol, samples, ref)
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
