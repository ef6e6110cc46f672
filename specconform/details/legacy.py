"""Typed detail records of schema-1 distribution archives (the frozen evaluator
specconform/kinds/distribution/legacy.py): written before family-wise verdicts, read
back so that old archives still verify and report. Rows without evidence carry
``reason`` (schema 2 says ``no_evidence``).

Alike-shaped field lists here and in the sibling modules are on purpose (each is one
test's archived key set): see :mod:`specconform.details.base`."""

from __future__ import annotations

from .base import Record, optional
from .distribution import (
    CoverageDetail,
    GofStratum,
    RejectionCounts,
    StratifiedFields,
    SupportDetail,
)


class LegacyGroupsGofDetail(Record):
    """t1_gof of schema 1: statistic and df are those of ``deciding_group``."""

    groups: tuple[str, ...]
    per_group: tuple[GofStratum, ...]
    combination: str
    deciding_group: str
    reason: str | None = optional()


class LegacyStratifiedDetail(StratifiedFields):
    """t2_gof, t3_gof, t2_homogeneity and joint of schema 1."""

    reason: str | None = optional()


class LegacyRejectionStratum(RejectionCounts):
    """One t1 stratum of schema 1's acceptance test (2-cell χ² and exact binomial)."""

    expected: tuple[float, ...]
    observed: tuple[int, ...]
    statistic: float | None
    df: float | None
    pvalue: float | None
    binom_pvalue: float | None
    pooled: tuple[int, ...]


class LegacyAcceptanceDetail(Record):
    """acceptance of schema 1: the strata's 2-cell χ² summed."""

    group: str
    draft_loops: int
    skipped_impossible_strata: tuple[dict[str, int], ...]
    mean_accepted_per_drafted: float | None
    mean_drafted: float | None
    mean_accepted: float | None
    aggregate: str
    min_samples: int
    min_expected: float
    strata_count: int
    aggregate_df: float
    strata: tuple[LegacyRejectionStratum, ...]
    reason: str | None = optional()


RECORDS: tuple[type[Record], ...] = (
    LegacyAcceptanceDetail,
    LegacyStratifiedDetail,
    LegacyGroupsGofDetail,
    SupportDetail,
    CoverageDetail,
)
