"""Typed detail records of the performance, equality and Monte Carlo kinds.

Alike-shaped field lists here and in the sibling modules are on purpose (each is one
test's archived key set): see :mod:`specconform.details.base`.
"""

from __future__ import annotations

from .base import Record, optional

# --- performance ---------------------------------------------------------------------------


class MetricSummary(Record):
    """mean ± SD [min, max] over n processes (SD with n - 1; None below two)."""

    n: int
    mean: float | None
    sd: float | None
    min: float | None
    max: float | None


class ThroughputDetail(Record):
    """One (concurrency, sampling) cell: candidate against base tokens/s under the
    pre-registered tolerance rule; ``ratio`` .. ``ranges_overlap`` once both sides have
    two processes."""

    statistic: str
    concurrency: int
    sampling: str
    rule: str
    max_slowdown: float
    sides: dict[str, dict[str, MetricSummary]]  # side -> metric -> summary
    per_process: dict[str, dict[str, tuple[float, ...]]]  # side -> metric -> per process
    welch_pvalue: float | None
    ratio: float | None = optional()
    floor: float | None = optional()
    mean_within: bool | None = optional()
    ranges_overlap: bool | None = optional()


class OrderDetail(Record):
    """abba_order: the pre-registered process order and the recorded one."""

    expected: tuple[str, ...]
    recorded: tuple[str, ...]


class PhaseTotals(Record):
    ops: int
    kernels: int
    copies: int
    self_cpu_us: float
    self_device_us: float


class LocationTotals(Record):
    location: str
    self_cpu_us: float
    self_device_us: float
    count: int


class SideProfile(Record):
    """One side's profiler attribution (``with_stack`` written only when False)."""

    with_stack: bool | None = optional()
    device: str | None
    steps: int
    phase_markers: bool
    phases: dict[str, PhaseTotals]
    ranked_by: str
    top: tuple[LocationTotals, ...]


class ProfileDetail(Record):
    """profile: per side, where the time went (reported only)."""

    base: SideProfile | None = optional()
    candidate: SideProfile | None = optional()

    def side(self, name: str) -> SideProfile | None:
        return {"base": self.base, "candidate": self.candidate}.get(name)


# --- equality ------------------------------------------------------------------------------


class DivergenceRecord(Record):
    """The first position where two greedy sequences of one prompt differ."""

    prompt: int
    position: int
    base_token: int | None
    candidate_token: int | None
    base_length: int
    candidate_length: int
    gap_base: float | None = None
    gap_candidate: float | None = None
    near_tie: bool = False


class EqualityDetail(Record):
    """One base/candidate comparison of greedy token sequences."""

    statistic: str
    base: str
    candidate: str
    prompts: int
    tokens_compared: int
    divergences: tuple[DivergenceRecord, ...]
    near_ties: int
    near_tie_gap: float
    near_ties_rule: str
    first: str | None


# --- Monte Carlo ---------------------------------------------------------------------------


class MonteCarloCellDetail(Record):
    """One case and position: the largest expected cells (``cell_index``) of its χ²."""

    case: str
    position: int
    cells: int
    pooled: tuple[int, ...]
    out_of_support: int
    cell_index: tuple[int, ...]
    observed: tuple[int, ...]
    expected: tuple[float, ...]


class OutOfVocabDetail(Record):
    tokens: int


class KernelErrorsDetail(Record):
    error_rows: int


PERFORMANCE_RECORDS: tuple[type[Record], ...] = (ThroughputDetail, OrderDetail, ProfileDetail)
EQUALITY_RECORDS: tuple[type[Record], ...] = (EqualityDetail,)
MONTECARLO_RECORDS: tuple[type[Record], ...] = (
    MonteCarloCellDetail,
    OutOfVocabDetail,
    KernelErrorsDetail,
)
