"""Typed detail records of the distribution kind (specconform/kinds/distribution/*).

Each record's fields are, in order, the keys its evaluator writes into the archive
(results/tests.json); :mod:`specconform.details.base` turns them into JSON and back.
Strata, pooled cells and per-group tables are records of their own, so a report reads
``row.detail.strata[0].observed`` instead of digging in dicts.

Alike-shaped field lists here and in the sibling modules are on purpose (each is one
test's archived key set): see :mod:`specconform.details.base`.
"""

from __future__ import annotations

from .base import Json, Record, optional

Label = int | str  # a cell: a token id, or "acc:5" / "rej:5" for the joint cells


class GofStratum(Record):
    """One goodness-of-fit stratum (or one group of t1_gof): counts per original cell,
    what pooled. ``group`` names a t1_gof group; ``t1``/``t2`` the conditioning prefix;
    ``tv`` is TV(p, q) of a joint-cell stratum."""

    group: str | None = optional()
    t1: int | None = optional()
    t2: int | None = optional()
    n: int
    statistic: float | None
    df: float | None
    pvalue: float | None
    cells: int
    out_of_support: int
    pooled: tuple[Label, ...]
    tokens: tuple[Label, ...]
    observed: tuple[int, ...]
    expected: tuple[float, ...]
    tv: float | None = optional()


class HomogeneityStratum(Record):
    """One t1 stratum of the two-sample test of t2 (group a against group b)."""

    t1: int
    n: int
    n_a: int
    n_b: int
    statistic: float | None
    df: float | None
    pvalue: float | None
    cells: int
    pooled: tuple[int, ...]
    tokens: tuple[int, ...]
    observed_a: tuple[int, ...]
    observed_b: tuple[int, ...]


class StratifiedFields(Record):
    """The keys a stratified row's detail has in either schema (all but the last: schema
    2's ``no_evidence``, schema 1's ``reason``). The head fields name what was
    stratified; which are present depends on the test."""

    group: str | None = optional()
    groups: tuple[str, ...] | None = optional()
    draft_loops: int | None = optional()
    skipped_impossible_strata: tuple[dict[str, int], ...] | None = optional()
    seed_split: str | None = optional()
    cells: str | None = optional()
    min_samples: int
    min_expected: float
    strata_count: int
    aggregate_df: float
    strata: tuple[GofStratum | HomogeneityStratum, ...]


class StratifiedDetail(StratifiedFields):
    """Strata's χ² summed into one row (t2_gof, t3_gof, t2_homogeneity, joint)."""

    no_evidence: str | None = optional()


class GroupsGofDetail(Record):
    """t1_gof: each group's t1 against p_t1; several groups combined by Bonferroni."""

    groups: tuple[str, ...]
    per_group: tuple[GofStratum, ...]
    combination: str
    # Written (possibly null) only when several groups were combined.
    smallest_p_group: str | None = None
    no_evidence: str | None = optional()

    def to_json(self) -> dict[str, Json]:
        out = super().to_json()
        if self.combination == "single group" and self.smallest_p_group is None:
            del out["smallest_p_group"]
        return out


class RejectionCounts(Record):
    """The leading keys of a t1 stratum of the acceptance test (either schema)."""

    t1: int
    n: int
    tv: float
    rejected: int
    expected_rejection_rate: float
    observed_rejection_rate: float | None


class RejectionStratum(RejectionCounts):
    """One t1 stratum of the first-position rejection test: rejections against TV."""

    binom_pvalue: float | None
    expected: tuple[float, ...]
    observed: tuple[int, ...]
    chi2_statistic: float | None
    chi2_df: float | None
    chi2_pvalue: float | None
    pooled: tuple[int, ...]


class AcceptanceDetail(Record):
    """acceptance: exact binomial per first-position stratum, Bonferroni over strata;
    with the observed and exact acceptance ratio the report's figure plots."""

    group: str
    draft_loops: int
    skipped_impossible_strata: tuple[dict[str, int], ...]
    min_samples: int
    strata_count: int
    strata: tuple[RejectionStratum, ...]
    decision: str
    rejected: int
    observed_rejection_rate: float | None
    expected_rejection_rate: float | None
    acceptance_ratio: float | None
    expected_acceptance_ratio: float | None
    mean_accepted_per_drafted: float | None
    mean_drafted: float | None
    mean_accepted: float | None
    no_evidence: str | None = optional()


class ScoreStratumRecord(Record):
    t1: int
    n: int


class ScoreDetail(Record):
    """score: the score test on the joint cells along the mutant directions."""

    group: str
    draft_loops: int
    directions: tuple[str, ...]
    score: tuple[float | None, ...]
    statistic: str
    df: float
    asymptotic_pvalue: float | None
    mc_replications: int
    mc_seed: tuple[int, ...]  # [crc32 of the test name, crc32 of the counts]
    out_of_support: int
    skipped_impossible_strata: tuple[dict[str, int], ...]
    strata_count: int
    strata: tuple[ScoreStratumRecord, ...]
    no_evidence: str | None = optional()


class NotApplicableDetail(Record):
    """A test the engine cannot be asked (e.g. acceptance without q)."""

    group: str
    no_evidence: str


class CoverageRecord(Record):
    """What the strata of one stratified test cover (``keys``: distribution kind only;
    the sequence kind states ``share`` for pit_uniformity only)."""

    strata: int
    keys: tuple[dict[str, int], ...] | None = optional()
    n_covered: int
    n_eligible: int
    share: float | None = optional()


class CoverageDetail(Record):
    statistic: str
    tests: dict[str, CoverageRecord]


class SupportCounts(Record):
    t1: int
    t2: int
    t3: int


class SupportDetail(Record):
    """out_of_support: observations of reference probability 0, per group and position."""

    per_group: dict[str, SupportCounts]
    rule: str


class EngineErrorCounts(Record):
    """The keys of an engine_errors row in either kind: requests that ended in an engine
    error per group, the deciding groups over the pre-registered tolerance."""

    per_group: dict[str, int]
    deciding_groups: tuple[str, ...]
    tolerance: int
    over_tolerance: tuple[str, ...]
    rule: str


class EngineErrorsDetail(EngineErrorCounts):
    """engine_errors: requests that ended in an engine error, per group and per batch."""

    per_batch: dict[str, dict[str, int]]
    batch: str
    no_evidence: str | None = optional()


class TrajectoryPoint(Record):
    """The e-process after one batch (log E None = infinite)."""

    seeds: int
    log_e: float | None
    sup_log_e: float | None


class SequentialDetail(Record):
    """The sequential run's deciding row: the e-process trajectory."""

    budget: int
    batch: int
    seeds_used: int
    batches_run: int
    log_threshold: float
    families: tuple[tuple[str, ...], ...]
    trajectory: tuple[TrajectoryPoint, ...]


# Most specific first: a detail object is read as the first record whose keys it fits.
RECORDS: tuple[type[Record], ...] = (
    SequentialDetail,
    AcceptanceDetail,
    ScoreDetail,
    StratifiedDetail,
    GroupsGofDetail,
    EngineErrorsDetail,
    SupportDetail,
    CoverageDetail,
    NotApplicableDetail,
)
