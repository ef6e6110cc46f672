"""Planning: what a protocol can detect before (and after) it runs.

- :mod:`.detectable`: the total variation each distribution test detects at N seeds
  per group, or the seeds it needs for a given TV (`specconform plan`);
- :mod:`.mutants`: power against the planted bugs' exact laws (the kill matrix);
- :mod:`.score`: the same for the score tests;
- :mod:`.run`: a finished run's ``results/plan.json`` (the kind table's ``plan``).
- :mod:`.evidence` and :mod:`.power`: the pre-run checks of `run` and `gate` (seeds too
  few for a deciding test's evidence; below the protocol's stated power target);
- :mod:`.law_cache`: the reference laws `specconform plan` replayed, cached on disk.

Numpy/scipy only; no torch.
"""

from specconform.planning.detectable import (
    DEFAULT_POWER,
    SeedsNeeded,
    StratumPlan,
    TestPlan,
    detectable_tv_for_run,
    plan_tests,
    planning_level,
    seeds_needed,
)
from specconform.planning.mutants import (
    MutantPower,
    _group_law,
    group_out_of_support,
    mutant_power,
    oracle_seeds,
    raw_laws,
    support_power,
    t3_laws,
)

__all__ = [
    "DEFAULT_POWER",
    "MutantPower",
    "SeedsNeeded",
    "StratumPlan",
    "TestPlan",
    "_group_law",
    "detectable_tv_for_run",
    "group_out_of_support",
    "mutant_power",
    "oracle_seeds",
    "plan_tests",
    "planning_level",
    "raw_laws",
    "seeds_needed",
    "support_power",
    "t3_laws",
]
