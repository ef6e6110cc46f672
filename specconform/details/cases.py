"""Typed detail records of the quadrature and McNemar kinds.

Alike-shaped field lists here and in the sibling modules are on purpose (each is one
test's archived key set): see :mod:`specconform.details.base`."""

from __future__ import annotations

from .base import Record, optional


class QuadratureCaseDetail(Record):
    """One quadrature case: the exact law's errors against the grid's bounds, and the
    target's top tokens (``expected``: (token, p) pairs; ``observed_first``: the
    committed first-token mass of the same tokens)."""

    statistic: str
    grid: int
    bound_first: float
    bound_bonus: float
    bound_k0: float
    max_abs_error_first: float
    max_abs_error_bonus: float
    max_abs_error_k0: float
    zero_mass_commits: int
    kernel_errors: int
    tokens_out_of_range: int
    tv_pq: float
    expected: tuple[tuple[float, ...], ...]
    observed_first: tuple[float, ...]


class Accuracy(Record):
    """A share of correct answers with its Wilson interval."""

    correct: int
    n: int
    accuracy: float
    wilson_low: float
    wilson_high: float
    level: float


class Detectable(Record):
    """The smallest accuracy drop detected with ``power`` at ``level`` (α over the
    ``pairs`` deciding pairs), by discordance rate; ``min_drop`` None: none at any."""

    trials: int
    power: float
    level: float
    pairs: int
    alternative: str
    drop_by_discordance: dict[str, float | None]
    min_drop: float | None


class McNemarPairDetail(Record):
    """One base/candidate pair: paired wins and losses, exact McNemar p-values, both
    accuracies and the pre-registered detectable drop."""

    metric: str
    base: str
    candidate: str
    trials: int
    wins: int
    losses: int
    ties: int
    both_right: int
    both_wrong: int
    discordant: int
    pvalue_two_sided: float | None
    pvalue_worse: float | None
    fail_on: str
    accuracy_base: Accuracy
    accuracy_candidate: Accuracy
    accuracy_difference: float
    detectable: Detectable
    tie: str | None = optional()


class _MetricGroup(Record):
    metric: str
    group: str


class GroupAccuracyDetail(Accuracy, _MetricGroup):
    """One group's accuracy on one metric (exploratory). Its keys: metric and group
    (``_MetricGroup``'s, first by the dataclass field order of the bases), then
    :class:`Accuracy`'s."""


class ErrorCountsDetail(Record):
    errors: dict[str, int]
    tolerance: int


QUADRATURE_RECORDS: tuple[type[Record], ...] = (QuadratureCaseDetail,)
MCNEMAR_RECORDS: tuple[type[Record], ...] = (
    McNemarPairDetail,
    GroupAccuracyDetail,
    ErrorCountsDetail,
)
