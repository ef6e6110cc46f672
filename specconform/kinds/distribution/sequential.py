"""Evaluate a sequential (anytime-valid) distribution run: the e-process row decides, the
fixed-N rows are informational.

A protocol with ``sequential: {batch: N}`` (pre-registered, or `run --sequential --batch
N`, recorded as an override) ran its groups N seeds at a time and stopped at the first
batch end where the e-process of :mod:`specconform.stats.eprocess` reached 1/alpha
(FAIL) or at the budget ``seeds.count`` (PASS). Under that optional stopping the
fixed-N tests' alpha does not hold (their false-fail rate grows with every look), so
they are reported as INFO on the seeds that ran and never decide; the e-process, whose
rate holds under any stopping rule (Ville), is the only deciding *statistical* row. The
deterministic rows keep deciding: ``out_of_support`` (an observation the reference gives
probability 0) and ``engine_errors`` cannot fire on a correct engine at any sample size,
so optional stopping leaves their false-fail rate at 0 — and an impossible t3 or an
engine error, which the e-process does not see, still fails the run.

Re-evaluation (`verify`) recomputes the e-process from raw/samples.csv and
raw/reference.json and checks the stopping point: every group holds the same seeds
``start .. start + n - 1``, and n is where the batch rule stops on the recomputed path —
a run that went on after crossing, or stopped early without crossing, does not verify.
Imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from specconform.details.distribution import SequentialDetail, TrajectoryPoint
from specconform.kinds.verdict import FamilyRule
from specconform.protocol.schema_sequential import SEQUENTIAL_TEST_NAME as TEST_NAME
from specconform.results import FAIL, INFO, PASS, Evaluation, TestRow, Verdict
from specconform.stats.eprocess import StoppingPoint, sequential_test, stopping_point
from specconform.stats.reference import Reference

from .context import DECIDING_ROLES
from .fixed import evaluate_fixed
from .tally import tally_frame

# Rows whose FAIL is a certainty, not a tail probability: valid under any stopping rule.
DETERMINISTIC_ROWS = ("out_of_support", "engine_errors")
INFO_REASON = (
    "informational: a sequential run stops when the e-process decides, and under that "
    "optional stopping this fixed-N test's alpha does not hold"
)
PVALUE_METHOD = "anytime-valid p = min(1, 1/max E) (Ville)"


def sequential_alpha(protocol: dict) -> float:
    """The e-process's level: the verdict's pre-registered family-wise level (its alpha
    less any numerics reserve)."""
    return FamilyRule.from_protocol(protocol, DECIDING_ROLES).level


def seeds_run(protocol: dict, samples: pd.DataFrame) -> int:
    """Seeds per group in ``samples``; raises ValueError unless every group holds exactly
    the seeds start .. start + n - 1 of its range (the e-process pairs seed indices)."""
    offset = int(protocol["seeds"]["offset"])
    counts = set()
    for g in protocol["groups"]:
        seeds = np.sort(samples.loc[samples["group"] == g["name"], "seed"].to_numpy(np.int64))
        start = offset + int(g.get("seed_offset") or 0)
        if not np.array_equal(seeds, np.arange(start, start + seeds.size)):
            raise ValueError(
                f"sequential run: group {g['name']} does not hold the consecutive seeds "
                f"{start}.. of its range"
            )
        counts.add(int(seeds.size))
    if len(counts) != 1:
        raise ValueError(f"sequential run: groups hold different numbers of seeds {counts}")
    return counts.pop()


def sequential_outcome(protocol: dict, samples: pd.DataFrame, ref: Reference) -> StoppingPoint:
    """The batch rule on the samples so far (the runner calls this after every batch)."""
    seeds_run(protocol, samples)
    result = sequential_test(protocol, ref, samples, alpha=sequential_alpha(protocol))
    budget = int(protocol["seeds"]["count"])
    return stopping_point(result.log_e, result.alpha, budget, int(protocol["sequential"]["batch"]))


def evaluate_sequential(protocol: dict, samples: pd.DataFrame, ref: Reference) -> Evaluation:
    """The e-process row (deciding), then every fixed-N row of the protocol as INFO."""
    n = seeds_run(protocol, samples)
    alpha = sequential_alpha(protocol)
    budget, batch = int(protocol["seeds"]["count"]), int(protocol["sequential"]["batch"])
    result = sequential_test(protocol, ref, samples, alpha=alpha)
    stop = stopping_point(result.log_e, alpha, budget, batch)
    if n != stop.seeds or (not stop.crossed and n != budget):
        raise ValueError(
            f"sequential run holds {n} seeds per group, but the batch rule (batch {batch}, "
            f"budget {budget}) stops at {stop.seeds if stop.crossed else budget}"
        )
    tallies = tally_frame(samples, ref.vocab_size)
    fixed = evaluate_fixed({k: v for k, v in protocol.items() if k != "sequential"}, tallies, ref)
    row = eprocess_row(stop, alpha, budget, batch, result.families)
    info = [r if _still_deciding(r) else _informational(r) for r in fixed.tests]
    certain = [r for r in info if r.deciding and r.status == FAIL]
    failed = ((TEST_NAME,) if stop.crossed else ()) + tuple(r.test for r in certain)
    verdict = Verdict(
        FAIL if failed else PASS,
        alpha,
        "sequential e-process: FAIL at the first batch where max E >= 1/alpha, PASS at the "
        "budget; an out-of-support observation or an engine error fails at any size",
        failed,
        combine="e-process",
        family_size=1,
        statement=(
            f"false-fail rate <= {alpha:g} under continuous monitoring (anytime-valid "
            f"e-process, Ville's inequality); {stop.seeds} of {budget} seeds per group "
            f"in batches of {batch}; fixed-N statistical rows informational"
        ),
        reasons=(((TEST_NAME, "max E >= 1/alpha"),) if stop.crossed else ())
        + tuple((r.test, r.reason or "deterministic check failed") for r in certain),
        schema=fixed.verdict.schema,
    )
    return Evaluation((row, *info), verdict)


def eprocess_row(stop: StoppingPoint, alpha: float, budget: int, batch: int, families) -> TestRow:
    """The deciding row: statistic log E at the stop, p = min(1, 1/max E), n = seeds per
    group used; detail carries the per-batch trajectory (log E null = infinite: an
    observation of reference probability 0)."""
    last = stop.trajectory[-1] if stop.trajectory else None
    sup = last.sup_log_e if last else 0.0
    detail = SequentialDetail(
        budget=budget,
        batch=batch,
        seeds_used=stop.seeds,
        batches_run=len(stop.trajectory),
        log_threshold=math.log(1.0 / alpha),
        families=tuple(tuple(f) for f in families),
        trajectory=tuple(
            TrajectoryPoint(seeds=p.seeds, log_e=_finite(p.log_e), sup_log_e=_finite(p.sup_log_e))
            for p in stop.trajectory
        ),
    )
    return TestRow(
        TEST_NAME,
        "primary",
        last.log_e if last else None,
        None,
        float(min(1.0, math.exp(-sup))),
        stop.seeds,
        alpha,
        not stop.crossed,
        detail,
        status=FAIL if stop.crossed else PASS,
        pvalue_method=PVALUE_METHOD,
        deciding=True,
        reason="max E >= 1/alpha" if stop.crossed else "",
    )


def _still_deciding(row: TestRow) -> bool:
    return row.deciding and row.test in DETERMINISTIC_ROWS


def _informational(row: TestRow) -> TestRow:
    return replace(
        row,
        status=INFO,
        passed=None,
        deciding=False,
        adjusted_pvalue=None,
        adjusted_method="",
        reason=INFO_REASON,
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
