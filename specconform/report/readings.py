"""What the reports read from a row's typed detail record, by shape.

A report renders every kind (and kinds it does not know, such as a plug-in's), so it
reads details through small structural protocols rather than one record class each:
a record that has ``observed``/``expected`` counts is drawn as bars, one whose
``strata`` have them as a scatter, one with ``acceptance_ratio`` as a point, one with a
``group`` gets a per-group table. Every record of specconform.details satisfies the
protocols it has the fields of; a detail with none of them (JsonDetail) is simply not
drawn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from specconform.details import Detail, JsonDetail
from specconform.details.cases import QuadratureCaseDetail
from specconform.details.distribution import CoverageDetail, CoverageRecord, GroupsGofDetail
from specconform.details.sequence import SequenceCoverageDetail


@runtime_checkable
class Counts(Protocol):
    """Observed and expected counts per cell (a stratum, or a whole row)."""

    observed: Sequence[Any]
    expected: Sequence[Any]


@runtime_checkable
class Stratified(Protocol):
    strata: Sequence[Any]


@runtime_checkable
class Grouped(Protocol):
    group: str | None


@runtime_checkable
class TwoGroups(Protocol):
    """A two-sample test: its groups and how their seeds were kept disjoint."""

    groups: Sequence[str] | None
    seed_split: str | None


@runtime_checkable
class AcceptanceRatio(Protocol):
    acceptance_ratio: float | None
    expected_acceptance_ratio: float | None


@runtime_checkable
class Labelled(Protocol):
    labels: Sequence[Any]


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def count_pairs(obj: Any) -> list[tuple[float, float]]:
    """(observed, expected) per cell of a record with both, of equal length; else []."""
    if not isinstance(obj, Counts):
        return []
    observed, expected = obj.observed, obj.expected
    # Some records count one cell (crossing_count: an observed and an expected number):
    # no per-cell pairs to draw.
    if not (hasattr(observed, "__len__") and hasattr(expected, "__len__")):
        return []
    if len(observed) != len(expected) or not observed:
        return []
    if not all(_number(o) and _number(e) for o, e in zip(observed, expected, strict=True)):
        return []
    return [(float(o), float(e)) for o, e in zip(observed, expected, strict=True)]


def strata_of(detail: Detail) -> Sequence[Any]:
    """The row's strata (empty when the record has none)."""
    return tuple(detail.strata) if isinstance(detail, Stratified) else ()


def labels_of(detail: Detail) -> list[str] | None:
    return [str(x) for x in detail.labels] if isinstance(detail, Labelled) else None


def group_of(detail: Detail) -> str | None:
    """The one group a row tests (per-group tables), or None."""
    group = detail.group if isinstance(detail, Grouped) else None
    return None if group is None else str(group)


def two_groups(detail: Detail) -> tuple[str, str, str] | None:
    """(group a, group b, seed split) of a two-sample test, or None."""
    if not isinstance(detail, TwoGroups) or detail.groups is None or len(detail.groups) != 2:
        return None
    a, b = (str(g) for g in detail.groups)
    return a, b, detail.seed_split or ""


def acceptance_ratio(detail: Detail) -> tuple[float, float | None] | None:
    """(observed, expected) first-position acceptance ratio, or None."""
    if not isinstance(detail, AcceptanceRatio):
        return None
    observed, expected = detail.acceptance_ratio, detail.expected_acceptance_ratio
    if observed is None or not _number(observed):
        return None
    return float(observed), float(expected) if expected is not None and _number(expected) else None


def group_pvalues(detail: Detail) -> list[tuple[str, float | None]]:
    """Each group's own p of a t1_gof combined over groups (Bonferroni), in order."""
    if not isinstance(detail, GroupsGofDetail):
        return []
    return [(str(g.group), g.pvalue) for g in detail.per_group]


def is_quadrature_case(detail: Detail) -> bool:
    return isinstance(detail, QuadratureCaseDetail)


@runtime_checkable
class CoverageNote(Protocol):
    """A row that states its own coverage (a plug-in kind's free-form note)."""

    coverage: Any


def coverage_of(detail: Detail) -> Any:
    return detail.coverage if isinstance(detail, CoverageNote) else None


def covered_tests(detail: Detail) -> dict[str, CoverageRecord]:
    """A coverage row's per-test coverage (distribution and sequence kinds), else {}."""
    if isinstance(detail, (CoverageDetail, SequenceCoverageDetail)):
        return dict(detail.tests)
    return {}


def scalar_facts(detail: Detail) -> list[tuple[str, Any]]:
    """The record's scalar fields (numbers and strings, not None, not bools) in field
    order: what a kind without its own report section still says about a row."""
    if dataclasses.is_dataclass(detail) and not isinstance(detail, JsonDetail):
        items = [(f.name, getattr(detail, f.name)) for f in dataclasses.fields(detail)]
    elif isinstance(detail, JsonDetail):
        items = list(detail.data.items())
    else:
        return []
    return [
        (k, v) for k, v in items if isinstance(v, (int, float, str)) and not isinstance(v, bool)
    ]
