"""A finished distribution run's ``results/plan.json``: what the run could detect.

The kind table names :func:`plan_bytes` as the distribution kind's ``plan``; the runner
calls it after evaluation (not for a sequential run: the planner sizes fixed-N tests,
which there are informational, and the e-process has no detectable-TV planner).
"""

from __future__ import annotations

import json

from specconform.evidence.jsonio import canonical_json_bytes
from specconform.planning.detectable import DEFAULT_POWER, detectable_tv_for_run


def plan_bytes(loaded, raw: dict[str, bytes], evaluation) -> bytes:
    """Each deciding test's detectable TV at power 0.99 at the run's seeds, from its own
    reference laws (`specconform plan`'s numbers)."""
    reference, unobserved = planning_reference(json.loads(raw["raw/reference.json"]))
    seeds = loaded.model.seeds.count
    plans = detectable_tv_for_run(loaded.data, reference, seeds)
    return canonical_json_bytes(
        {
            "power": DEFAULT_POWER,
            "seeds": seeds,
            "tests": [p.to_json() for p in plans],
            "unobserved_first_tokens": unobserved,
            "note": "first tokens never observed have no replayed laws; they are planned as "
            "one-token strata, which never reach the strata threshold at this size "
            "(their expected count is below it with overwhelming probability)",
        }
    )


def planning_reference(reference: dict) -> tuple[dict, int]:
    """The run's reference laws completed for the planner, which needs a conditional
    law for every possible first token: a run replays only the observed ones."""
    p2 = dict(reference.get("p_t2", {}))
    q2 = {d: dict(laws) for d, laws in reference.get("q_t2", {}).items()}
    missing = [t for t, v in reference["p_t1"].items() if float(v) > 0 and t not in p2]
    for t in missing:
        p2[t] = {t: 1.0}
        for laws in q2.values():
            laws[t] = {t: 1.0}
    for laws in q2.values():
        for t in p2:
            laws.setdefault(t, dict(p2[t]))
    return {**reference, "p_t2": p2, "q_t2": q2}, len(missing)
