"""Evaluate a sequence protocol from its raw data: every pre-registered test, the
out-of-support, engine-error and coverage rows, and the family-wise verdict.

Raw data (written by the runner, contract in :mod:`.raw`): raw/sequence/requests.csv,
raw/sequence/tokens.csv, raw/sequence/checks.json. Imports no torch: ``verify``
recomputes verdicts on a laptop.
"""

from __future__ import annotations

from specconform.kinds.verdict import family_verdict
from specconform.protocol.schema_sequence import DETERMINISTIC_TYPES
from specconform.results import Evaluation, RawData

from .checks import check_row, coverage_row, engine_errors_row, support_row
from .context import Context
from .raw import CHECKS, REQUESTS, TOKENS
from .records import read_frames
from .stochastic import TESTS


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute every test and the verdict from a run's raw files."""
    return evaluate_frames(protocol, raw.csv(REQUESTS), raw.csv(TOKENS), raw.json(CHECKS))


def evaluate_frames(protocol: dict, requests_df, tokens_df, checks: dict) -> Evaluation:
    """Same as :func:`evaluate` from in-memory data: pandas frames with the columns of
    requests.csv and tokens.csv (tokens in file row order: it fixes the V_t) and the
    dict of checks.json. Calibration calls it once per replication."""
    if not isinstance(checks, dict):
        raise ValueError("checks.json: not a JSON object")
    requests, tokens = read_frames(protocol, requests_df, tokens_df)
    ctx = Context.build(protocol, requests, tokens)
    rows, coverage = [], {}
    for spec in protocol["tests"]:
        if spec["type"] in DETERMINISTIC_TYPES:
            rows.append(check_row(ctx, spec, checks, protocol))
            continue
        row, cov = TESTS[spec["type"]](ctx, spec)
        rows.append(row)
        if spec["type"] == "pit_uniformity":
            coverage[spec["name"]] = cov
    deciding = deciding_groups(ctx, protocol)
    rows += [
        coverage_row(ctx, coverage),
        support_row(ctx, deciding, protocol),
        engine_errors_row(ctx, deciding),
    ]
    decided, verdict = family_verdict(rows, ctx.rule)
    return Evaluation(decided, verdict)


def deciding_groups(ctx: Context, protocol: dict) -> set[str]:
    """Groups read by a deciding test: those it names (and its ``against``), or every
    group when it names none (a deterministic check then covers the whole run)."""
    out: set[str] = set()
    for spec in protocol["tests"]:
        if spec["role"] not in ctx.rule.roles:
            continue
        if spec["type"] in DETERMINISTIC_TYPES and not spec.get("groups"):
            out |= set(ctx.modes)
        else:
            out |= set(ctx.groups_of(spec))
        if spec.get("against"):
            out.add(spec["against"])
    return out
