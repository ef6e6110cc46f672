"""Engine-free calibration: samples drawn from exact laws, judged by the real evaluator.

A :class:`World` holds exact laws as dense tables: either a run's ``reference.json``
(:func:`world_from_reference`: the shipped evidence archive's, or one replayed for every
prefix by ``bench/calibration_make_reference.py``) or deterministic synthetic laws
(:func:`make_world`, a test fixture). :func:`simulate` draws ``samples.csv`` for the
*protocol's own groups*, with the first draft position exactly as the sampling core does
it: draft x ~ q, accept iff u·q(x) < p(x), else the correction from (p − q)₊.
:func:`replicate` runs the protocol's evaluator on each replication and records every
test row and the verdict *as the Evaluation states it*, so whatever decision rule the
protocol file declares is what gets measured (no copy of any protocol lives here).

Dependence is reproduced, not assumed away: every seed owns one row of uniforms, so
groups sharing a seed (sync/async at one depth) produce identical samples and all
speculative groups share t1 — the worst case the combination rules must survive.

Mutants (``MUTANTS``) are wrong samplers for the power side. Numpy/scipy/pandas only.
The laws and the sampling live in :mod:`.world`, the replications and their summaries
in :mod:`.replicate`; this package re-exports both.
"""

from __future__ import annotations

from specconform.calibration.replicate import (
    RUN_COLUMNS,
    SecondLevel,
    deciding_tests,
    replicate,
    second_level,
    stated_verdict_rate,
    summarize,
    verdict_bound,
)
from specconform.calibration.world import (
    MUTANTS,
    STANDARD_GROUPS,
    K,
    World,
    evaluate_frames,
    load_reference,
    make_world,
    simulate,
    world_from_reference,
)

__all__ = [
    "K",
    "MUTANTS",
    "RUN_COLUMNS",
    "STANDARD_GROUPS",
    "SecondLevel",
    "World",
    "deciding_tests",
    "evaluate_frames",
    "load_reference",
    "make_world",
    "replicate",
    "second_level",
    "simulate",
    "stated_verdict_rate",
    "summarize",
    "verdict_bound",
    "world_from_reference",
]
