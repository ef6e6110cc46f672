"""The machinery every typed detail record shares (torch-free, pure Python).

A detail record is a class deriving from :class:`Record`, which makes every subclass a
frozen, keyword-only dataclass (one rule stated once, as pydantic's ``BaseModel`` does:
no record can forget ``frozen`` and become mutable after it was read from an archive,
and type checkers see the dataclass through ``dataclass_transform``). Its fields, in
declaration order, are the keys of its JSON object; ``to_json`` writes exactly that
object (nested records through their own ``to_json``, tuples as lists) and
``from_json`` reads it back, checking every key and value against the field's type.
A field declared with :func:`optional` is written only when it is not None: it is a key
an evaluator adds in some cases only (``no_evidence``, ``tie``, ...), so archives keep
the exact objects written before these types existed.

Field types a record may use: ``str``, ``int``, ``float`` (an int stays an int, so the
archive's bytes do not change), ``bool``, another record, a union of records (the first
whose keys fit is read), ``tuple[X, ...]``, ``dict[str, X]``, ``X | None`` and
:data:`Json` (open JSON data the engine wrote, e.g. a check's mismatch examples, kept
as it was).

Records whose field lists merely look alike (``n``, ``statistic``, ``df``, ``pvalue``,
...: same shape, other names) stay written out: each class is the key set of one test's
archived JSON object, read back strictly (``from_json``), so a shared base would tie
unrelated tests' archive formats together. A key set that two records share because
they state the same thing is declared once, in a base whose fields come first
(``RejectionCounts``, ``StratifiedFields``, ``PitStrataFields``, ``EngineErrorCounts``,
``Accuracy``). Key *order* is not part of the archive's bytes
(``evidence.jsonio.canonical_json_bytes`` sorts keys); declaration order is only the
order ``to_json`` builds the object in.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, Union, runtime_checkable

from typing_extensions import dataclass_transform  # typing's: Python 3.11

# Open JSON data carried as it is (the engine's own examples, labels of open shape).
Json = Any

_OMIT = "omit_if_none"
R = TypeVar("R", bound="Record")


class DetailError(ValueError):
    """A detail object that is not the record it should be. The archive reader turns it
    into an EvidenceError naming the test (a malformed archive: one line, exit 3)."""


@runtime_checkable
class Detail(Protocol):
    """What a :class:`specconform.results.TestRow` carries as its ``detail``."""

    def to_json(self) -> dict[str, Any]: ...


def optional(default: Any = None) -> Any:
    """A key present only in some archives/cases: omitted from JSON while None."""
    return dataclasses.field(default=default, metadata={_OMIT: True})


@dataclass_transform(
    kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,)
)
class Record:
    """Base of the detail records: each subclass becomes a frozen, keyword-only
    dataclass when it is defined (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)

    def __post_init__(self) -> None:
        # Lists handed in by evaluators become tuples (frozen, and equal to what
        # from_json reads back); nested mappings become their records.
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            coerced = _coerce(_hints(type(self))[f.name], value, strict=False, where=f.name)
            if coerced is not value:
                object.__setattr__(self, f.name, coerced)

    def replace(self: R, **changes: Any) -> R:
        """A copy with ``changes`` (e.g. ``no_evidence=...``), checked like a new record."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get(_OMIT):
                continue
            out[f.name] = _encode(value)
        return out

    @classmethod
    def fits(cls, obj: Any) -> bool:
        """Whether ``obj`` has this record's keys (required ones present, no others)."""
        if not isinstance(obj, Mapping):
            return False
        required, allowed = _keys(cls)
        present = set(obj)
        return required <= present <= allowed

    @classmethod
    def from_json(cls: type[R], obj: Mapping[str, Any]) -> R:
        """The record from its JSON object; missing optional keys take their defaults.
        Raises :class:`DetailError` naming the first key that does not fit."""
        if not isinstance(obj, Mapping):
            raise DetailError(f"{cls.__name__}: expected an object, got {_kind(obj)}")
        required, allowed = _keys(cls)
        extra = sorted(set(obj) - allowed)
        if extra:
            raise DetailError(f"{cls.__name__}: unexpected key {extra[0]!r}")
        missing = sorted(required - set(obj))
        if missing:
            raise DetailError(f"{cls.__name__}: missing key {missing[0]!r}")
        hints = _hints(cls)
        values = {
            name: _coerce(hints[name], obj[name], strict=True, where=f"{cls.__name__}.{name}")
            for name in obj
        }
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}
_KEYS: dict[type, tuple[frozenset[str], frozenset[str]]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The record's resolved field types (cached: records are built per stratum)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _keys(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """(keys every object of the record has, every key it may have)."""
    if cls not in _KEYS:
        fields = dataclasses.fields(cls)
        required = frozenset(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        _KEYS[cls] = (required, frozenset(f.name for f in fields))
    return _KEYS[cls]


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _coerce(tp: Any, value: Any, *, strict: bool, where: str) -> Any:
    """``value`` as type ``tp``. ``strict`` (reading an archive) checks every leaf; when
    False (an evaluator building a record) only containers and records are converted."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise DetailError(f"{where}: null where a value is required")
        members = [a for a in args if a is not type(None)]
        records = [a for a in members if isinstance(a, type) and issubclass(a, Record)]
        if records and isinstance(value, Mapping):
            for rec in records:
                if rec.fits(value):
                    return _coerce(rec, value, strict=strict, where=where)
            raise DetailError(f"{where}: object fits none of {[r.__name__ for r in records]}")
        if isinstance(value, Record):
            if records and isinstance(value, tuple(records)):
                return value
            raise DetailError(f"{where}: a {type(value).__name__} where {tp} belongs")
        errors = []
        for member in members:
            try:
                return _coerce(member, value, strict=strict, where=where)
            except DetailError as exc:
                errors.append(str(exc))
        raise DetailError(errors[0] if errors else f"{where}: no type fits")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise DetailError(f"{where}: expected a list, got {_kind(value)}")
        (item, *_) = typing.get_args(tp)
        if not strict and item in (int, float, str, bool, Any):
            return value if isinstance(value, tuple) else tuple(value)
        return tuple(_coerce(item, v, strict=strict, where=f"{where}[]") for v in value)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise DetailError(f"{where}: expected an object, got {_kind(value)}")
        _, item = typing.get_args(tp)
        if not strict and item in (int, float, str, bool, Any) and isinstance(value, dict):
            return value
        return {
            str(k): _coerce(item, v, strict=strict, where=f"{where}.{k}") for k, v in value.items()
        }
    if isinstance(tp, type) and issubclass(tp, Record):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return tp.from_json(value)
        raise DetailError(f"{where}: expected a {tp.__name__} object, got {_kind(value)}")
    if not strict:
        return value
    return _leaf(tp, value, where)


def _leaf(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str)
    else:
        raise DetailError(f"{where}: unsupported field type {tp!r}")
    if not ok:
        raise DetailError(f"{where}: expected {tp.__name__}, got {_kind(value)}")
    return value
