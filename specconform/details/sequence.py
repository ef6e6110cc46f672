"""Typed detail records of the sequence kind (specconform/kinds/sequence/*).

Alike-shaped field lists here and in the sibling modules are on purpose (each is one
test's archived key set): see :mod:`specconform.details.base`.
"""

from __future__ import annotations

from .base import Json, Record, optional
from .distribution import CoverageRecord, EngineErrorCounts


class UniformityStratum(Record):
    """One stratum's χ² of U's on equiprobable bins (pit_uniformity, mechanism_pit):
    group, the law (mechanism_pit only), the slot and round bands, then the counts."""

    group: str
    law: str | None = optional()
    slot: str
    rounds: tuple[str, ...]
    n: int
    statistic: float | None
    df: float | None
    pvalue: float | None
    observed: tuple[int, ...]
    expected: tuple[float, ...]
    ks_statistic: float | None
    ks_pvalue: float | None


class PitStrataFields(Record):
    """The keys of a χ² of U's over strata on equiprobable bins, either PIT's (the
    committed token's, pit_uniformity; the draft mechanism's, mechanism_pit). The row's
    statistic_text and no_evidence stay last in each record: the PR report states a
    generic kind's scalar keys in field order (report.readings.scalar_facts)."""

    groups: tuple[str, ...]
    bins: int
    min_samples: int
    round_bands: tuple[int, ...]
    strata_count: int
    strata: tuple[UniformityStratum, ...]
    untested_slots: dict[str, dict[str, int]]


class UniformityDetail(PitStrataFields):
    """pit_uniformity: strata of the PIT U summed."""

    n_covered: int
    n_eligible: int
    statistic_text: str
    no_evidence: str | None = optional()


class PairStratum(Record):
    """One group's contingency table of (first U bin, second U bin)."""

    group: str
    n: int
    statistic: float | None
    df: float | None
    pvalue: float | None
    observed: tuple[tuple[int, ...], ...]
    rows_tested: tuple[int, ...]


class IndependenceDetail(Record):
    """pit_independence: pairs of U's, χ² of independence summed over rows and groups."""

    groups: tuple[str, ...]
    pairs: str
    pair: str
    grid: int
    min_expected: float
    strata_count: int
    strata: tuple[PairStratum, ...]
    statistic_text: str
    no_evidence: str | None = optional()


class CorrelationGroup(Record):
    group: str
    n: int
    sum_products: float


class CorrelationDetail(Record):
    """pit_correlation: pairs of U's, z of Σ (U_a − 1/2)(U_b − 1/2) pooled over groups."""

    groups: tuple[str, ...]
    pairs: str
    pair: str
    min_pairs: int
    per_group: tuple[CorrelationGroup, ...]
    z: float | None
    statistic_text: str
    no_evidence: str | None = optional()


class PositionCell(Record):
    """Drafted positions pooled into one cell of acceptance_all."""

    positions: tuple[int, ...]
    n: int
    rejected: int
    expected: float
    variance: float
    z: float | None
    observed_rejection_rate: float | None
    expected_rejection_rate: float | None


class AcceptanceGroup(Record):
    group: str
    n: int
    rejected: int
    expected_rejections: float
    variance: float
    statistic: float | None
    df: float | None
    pvalue: float | None
    total_z: float | None
    total_pvalue: float | None
    without_tv: int
    positions: tuple[PositionCell, ...]


class AcceptanceAllDetail(Record):
    """acceptance_all: rejections per drafted position against Σ TV, z² summed."""

    groups: tuple[str, ...]
    min_expected: float
    strata_count: int
    strata: tuple[AcceptanceGroup, ...]
    rejected: int
    expected_rejections: float
    observed_rejection_rate: float | None
    expected_rejection_rate: float | None
    statistic_text: str
    no_evidence: str | None = optional()


class LawCounts(Record):
    """One group's drafted tokens of one law: how many the mechanism PIT could test."""

    group: str
    law: str
    tokens: int
    without_q: int
    boundary: int
    out_of_support: int
    eligible: int


class MechanismPitDetail(PitStrataFields):
    """mechanism_pit: the mechanism PIT's strata (law x position x round band)."""

    statistic_text: str
    no_evidence: str | None = optional()
    laws: dict[str, str]  # what the mechanism PIT adds: its laws and their token counts
    counts: tuple[LawCounts, ...]


class MeanGroup(Record):
    group: str
    law: str
    n: int
    mean: float | None
    z: float | None
    pvalue: float | None
    tested: bool


class MechanismMeanDetail(Record):
    """mechanism_mean: z of the mean mechanism PIT against 1/2 per group and law."""

    groups: tuple[str, ...]
    laws: dict[str, str]
    min_samples: int
    per_group: tuple[MeanGroup, ...]
    statistic_text: str
    no_evidence: str | None = optional()


class CrossingDetail(Record):
    """crossing_count: committed top-p crossing tokens O against E (kinds/sequence/crossing.py)."""

    groups: tuple[str, ...]
    min_position: int | None = optional()
    n: int
    observed: int
    expected: float
    variance: float
    z: float | None
    min_expected: float
    statistic_text: str
    no_evidence: str | None = optional()


class BonusAcceptDetail(Record):
    """accept_after_bonus: the next round's first accept decision against the bonus's
    mid-PIT (kinds/sequence/bonus_accept.py); ``per_group``: pairs per group."""

    groups: tuple[str, ...]
    n: int
    per_group: dict[str, int]
    accepted: int
    expected_accepted: float
    sum_weighted: float
    variance: float
    z: float | None
    min_pairs: int
    min_expected: float
    statistic_text: str
    no_evidence: str | None = optional()


class CheckDetail(Record):
    """A deterministic check recorded by the runner in raw/checks.json (``examples``: the
    runner's first mismatches, kept as written)."""

    type: str
    applicable: bool
    why: str
    checked: int
    mismatches: int
    max_abs_diff: float | None
    tolerance: float | None
    examples: tuple[Json, ...]
    rule: str
    # With the protocol's numerics block (issue 32; kinds/sequence/numerics.py): the
    # model the check was held to (law_bound derived), and for token comparisons the
    # decisions compared, the mismatches inside the model's error (near-ties, not in
    # ``mismatches``), the most the model allows, and the first near-ties.
    numerics: Json | None = optional()
    decisions: int | None = optional()
    near_ties: int | None = optional()
    near_tie_limit: int | None = optional()
    near_tie_examples: tuple[Json, ...] | None = optional()


class Offender(Record):
    request: int
    step: int


class SequenceSupportDetail(Record):
    """out_of_support: committed tokens of reference probability 0 (and, with the
    mechanism columns, drafted tokens of conditional probability 0)."""

    per_group: dict[str, int]
    deciding_groups: tuple[str, ...]
    first: dict[str, Offender]
    rule: str
    mechanism_per_group: dict[str, int] | None = optional()
    mechanism_first: dict[str, Offender] | None = optional()
    mechanism_rule: str | None = optional()
    # Under the protocol's numerics block (issue 32): zero-probability tokens whose filter
    # decision (top-k, top-p, greedy argmax) lies inside the model's error (tokens.csv
    # filter_margin <= 1), counted apart from the offenders above, against the most the
    # model allows over ``decisions`` (tokens of filtered or greedy requests).
    decisions: int | None = optional()
    near_ties: int | None = optional()
    near_tie_limit: int | None = optional()
    near_tie_examples: tuple[Json, ...] | None = optional()


class SequenceEngineErrorsDetail(EngineErrorCounts):
    """engine_errors of a sequence run: per group only (its requests run in one call)."""


class GroupTokens(Record):
    tokens: int
    random: int
    greedy: int
    out_of_support: int
    requests: int
    per_slot: dict[str, int]


class SequenceCoverageDetail(Record):
    statistic: str
    per_group: dict[str, GroupTokens]
    tests: dict[str, CoverageRecord]


RECORDS: tuple[type[Record], ...] = (
    UniformityDetail,
    MechanismPitDetail,
    IndependenceDetail,
    CorrelationDetail,
    AcceptanceAllDetail,
    MechanismMeanDetail,
    CrossingDetail,
    BonusAcceptDetail,
    CheckDetail,
    SequenceSupportDetail,
    SequenceEngineErrorsDetail,
    SequenceCoverageDetail,
)
