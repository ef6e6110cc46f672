"""Typed per-test detail records, and the one table that reads them back by kind.

A :class:`specconform.results.TestRow` carries its per-stratum detail as one of these
frozen records (the :class:`Detail` protocol: ``to_json()``); the archive stores
``detail.to_json()``, exactly the object the evaluators wrote before these types
existed. :func:`parse_detail` reads an archived object back: the kind's records are
tried most specific first, and the first whose keys the object has is read, every key
and value checked (:class:`DetailError` otherwise).

A kind not in :data:`TYPED_KINDS` (a plug-in kind that registered no records with
:func:`register_records`) carries :class:`JsonDetail`: the JSON object as written, read through ``.data``.
Schema-1 distribution archives are read with :mod:`specconform.details.legacy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import cases, distribution, legacy, runs, sequence, tree
from .base import Detail, DetailError, Record

__all__ = [
    "Detail",
    "DetailError",
    "JsonDetail",
    "Record",
    "parse_detail",
    "records_of",
    "register_records",
]


@dataclass(frozen=True)
class JsonDetail:
    """The detail of a kind that has no typed records yet: its JSON object as written."""

    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)


# kind -> its records, most specific first: the one place a kind's records are stated.
# A kind not listed carries JsonDetail. They live here, below the kinds layer, because
# readers need them there (an archive is read, and its rows typed, without importing any
# evaluator); the kind table reads them (``Kind.records``, ``Kind.schema1_records``).
TYPED_KINDS: dict[str, tuple[type[Record], ...]] = {
    "distribution": distribution.RECORDS,
    "sequence": sequence.RECORDS,
    "quadrature": cases.QUADRATURE_RECORDS,
    "mcnemar": cases.MCNEMAR_RECORDS,
    "performance": runs.PERFORMANCE_RECORDS,
    "equality": runs.EQUALITY_RECORDS,
    "montecarlo": runs.MONTECARLO_RECORDS,
    "tree": tree.RECORDS,
}
# kind -> the records of its archives of the first results schema (before family-wise
# verdicts), read by the frozen evaluators' shapes.
SCHEMA1_RECORDS: dict[str, tuple[type[Record], ...]] = {"distribution": legacy.RECORDS}
_EVERY_RECORD = tuple(r for records in TYPED_KINDS.values() for r in records) + legacy.RECORDS


def register_records(kind: str, records: tuple[type[Record], ...]) -> None:
    """Register the detail records of a kind defined outside specconform (a plug-in's,
    the evidence tests' toy kind), so its archives read back typed."""
    TYPED_KINDS[kind] = tuple(records)


def records_of(kind: str | None, schema: int = 2) -> tuple[type[Record], ...]:
    """The records a row of ``kind`` may carry (none: the kind carries JsonDetail)."""
    if schema < 2 and kind in SCHEMA1_RECORDS:
        return SCHEMA1_RECORDS[kind]
    return TYPED_KINDS.get(kind or "", ())


def parse_detail(obj: Any, kind: str | None = None, *, schema: int = 2) -> Detail:
    """The detail record of an archived row's ``detail`` object.

    ``kind`` is the archive's protocol kind; None (a caller that does not know it) tries
    every typed record and keeps the object as :class:`JsonDetail` when none fits.
    Schema-1 distribution archives carry the frozen evaluator's shapes (legacy records).
    Raises :class:`DetailError` when a typed kind's object fits none of its records."""
    if not isinstance(obj, Mapping):
        raise DetailError(f"detail is {type(obj).__name__}, not an object")
    if not obj or (kind is not None and kind not in TYPED_KINDS):
        return JsonDetail(dict(obj))  # {}: a row without detail (TestRow's default)
    candidates = records_of(kind, schema) if kind is not None else _EVERY_RECORD
    for record in candidates:
        if record.fits(obj):
            return record.from_json(obj)
    if kind is None:
        return JsonDetail(dict(obj))
    keys = ", ".join(sorted(obj)) or "none"
    raise DetailError(f"detail fits no {kind} record (keys: {keys})")
