"""Out-of-support offenders and engine errors of a distribution run, from its raw files.

The evaluator (kinds.distribution.rows.support_row) counts observations of reference
probability 0 per group and position; which request, seed and token they were is in
raw/samples.csv, and p (0) and q (the draft law at the first draft position, when the
reference recorded it: raw/reference.json q_t2) in raw/reference.json. This module finds
the first offenders (in group order, then seed order) with the same rule the evaluator
counts by, so the diagnosis and the row's count agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from specconform.kinds.distribution.context import GroupData, GroupPlan
from specconform.stats.reference import Reference

from .model import TOP_OFFENDERS, Offender


def first_offenders(
    data: Mapping[str, GroupData],
    plans: Mapping[str, GroupPlan],
    ref: Reference,
    decode: Callable[[object], str] = str,
    limit: int = TOP_OFFENDERS,
    q_t3: Mapping | None = None,
) -> tuple[tuple[Offender, ...], int]:
    """(the first ``limit`` offenders, how many there are in all); the i-th offender is
    `specconform replay --case i`. ``q_t3``: reference.json's ``q_t3_offenders`` (q of
    the out-of-support t3 tokens, recorded by the runner), when present."""
    w = ref.vocab_size + 1
    found: list[Offender] = []
    total = 0
    for name, g in sorted(data.items()):
        # The evaluator's own rule (kinds/distribution/rows.support_row), not a copy.
        _, (bad1, bad2, bad3) = ref.unsupported(g.t1, g.t2, g.t3, w)
        total += int(bad1.sum() + bad2.sum() + bad3.sum())
        bad = np.flatnonzero(bad1 | bad2 | bad3)
        for i in bad[: max(0, limit - len(found))]:
            position = 0 if bad1[i] else (1 if bad2[i] else 2)
            tokens = (int(g.t1[i]), int(g.t2[i]), int(g.t3[i]))
            token = tokens[position]
            q = _draft_q(ref, plans.get(name), tokens, position, q_t3 or {})
            found.append(
                Offender(
                    group=name,
                    request=int(i),
                    seed=int(g.seed[i]),
                    position=position,
                    token=token,
                    prefix=tokens[:position],
                    p=0.0,
                    q=q,
                    label=decode(token),
                )
            )
    return tuple(found), total


def _draft_q(
    ref: Reference, plan: GroupPlan | None, tokens, position: int, q_t3: Mapping
) -> float | None:
    """q of the token at its position under the group's draft depth: t2 from the
    reference's q_t2, t3 from q_t3_offenders; None where neither has it (a t1, a nospec
    group, an archive from before q_t3_offenders: replay measures it)."""
    if position == 0 or plan is None or plan.draft_loops is None:
        return None
    if position == 2:
        found = (q_t3.get(str(plan.draft_loops)) or {}).get(f"{tokens[0]},{tokens[1]}") or {}
        q = found.get(str(tokens[2]))
        return None if q is None else float(q)
    law = ref.q2.get(int(plan.draft_loops), {}).get(tokens[0])
    if law is None:
        return None
    hit = np.flatnonzero(law[0] == tokens[1])
    return float(law[1][hit[0]]) if hit.size else 0.0


def first_errors(data: Mapping[str, GroupData]) -> list[str]:
    """The first request per group that ended in an engine error."""
    out = []
    for name, g in sorted(data.items()):
        if g.error is None or not g.error.any():
            continue
        i = int(np.flatnonzero(g.error)[0])
        out.append(
            f"group {name}: {int(g.error.sum())} error(s); first request {i} seed {int(g.seed[i])}"
        )
    return out
