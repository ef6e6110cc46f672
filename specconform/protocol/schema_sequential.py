"""The ``sequential`` field of distribution protocols: the anytime-valid mode.

``sequential: {batch: N}`` (pre-registered, or `specconform run --sequential --batch N`,
an override): the groups run N seeds each at a time, up to ``seeds.count`` (the budget);
the verdict is the e-process of specconform.stats.eprocess, FAIL at the first batch where
it reached 1/alpha, PASS at the budget; the fixed-N rows are informational
(specconform.kinds.distribution.sequential). Absent (None): the fixed-N protocol.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from specconform.protocol.schema_base import COUNT_MAX

SEQUENTIAL_TEST_NAME = "sequential_eprocess"  # the deciding row of a sequential run


class SequentialPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    batch: Annotated[int, Field(ge=1, le=COUNT_MAX)]  # at most the budget, seeds.count


def check_sequential(plan: SequentialPlan | None, budget: int, test_names: list[str]) -> None:
    """Raise ValueError for a batch above the budget or a test named like the e-process."""
    if plan is None:
        return
    if plan.batch > budget:
        raise ValueError(
            f"sequential batch {plan.batch} exceeds the budget of {budget} seeds per "
            "group (seeds.count)"
        )
    if SEQUENTIAL_TEST_NAME in test_names:
        raise ValueError(f"test name {SEQUENTIAL_TEST_NAME!r} is reserved for sequential runs")
