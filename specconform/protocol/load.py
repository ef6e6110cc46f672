"""Load, validate, hash and override protocol files.

The canonical form of a protocol is the JSON of its validated model (defaults filled in,
keys sorted, no whitespace): key order, comments and formatting of the YAML never change
the hash; any criterion does. The hash is taken *before* command-line overrides, so it
names the pre-registration; overrides are recorded next to it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from specconform.protocol.schema_base import BOUND_HINTS, PATTERN_HINTS
from specconform.protocol.union import KIND_NAMES, Protocol
from specconform.protocol.yaml_safe import YamlRefused, parse_yaml, read_protocol_bytes
from specconform.util.errors import ProtocolError, UsageError

# A discriminated union of the kinds' models (mypy cannot type a TypeAdapter of an
# Annotated union; pydantic validates it at run time).
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Protocol)  # type: ignore[arg-type]


@dataclass(frozen=True)
class LoadedProtocol:
    path: Path
    source: bytes  # the file's bytes as given
    model: Any  # the validated model, overrides applied
    hash: str  # sha256 of the canonical JSON before overrides
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        """The validated protocol (overrides applied) as plain JSON-able data."""
        return self.model.model_dump(mode="json")

    @property
    def kind(self) -> str:
        return self.model.kind

    @property
    def name(self) -> str:
        return self.model.name


def canonical_json(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def protocol_hash(model) -> str:
    return hashlib.sha256(canonical_json(model.model_dump(mode="json")).encode()).hexdigest()


def load_protocol(path: str | Path) -> LoadedProtocol:
    """Read, parse and validate a protocol file. Any bad input, whatever its kind, raises
    UsageError (ProtocolError for a file that is read but invalid) with a one-line
    message: the file must be a regular file of at most 1 MiB, its YAML within the
    limits of `yaml_safe` (depth, aliases, numbers, no duplicate keys), its content
    within the schema's bounds (schema_base)."""
    path = Path(path)
    try:
        source = read_protocol_bytes(path)
    except YamlRefused as exc:
        raise UsageError(one_line(f"{path}: {exc}")) from None
    try:
        data = parse_yaml(source)
    except YamlRefused as exc:
        raise ProtocolError(one_line(f"{path}: {exc}")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ProtocolError(one_line(f"{path}: not valid YAML{where}: {problem}")) from None
    if not isinstance(data, dict):
        raise ProtocolError(one_line(f"{path}: a protocol file must be a YAML mapping"))
    model = validate(data, path)
    try:
        digest = protocol_hash(model)
    except UnicodeEncodeError:
        raise ProtocolError(
            one_line(f"{path}: a string holds a lone surrogate (not Unicode text)")
        ) from None
    return LoadedProtocol(path, source, model, digest)


def validate(data: dict[str, Any], path: Path | str):
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ProtocolError(one_line(f"{path}: {_first_problem(exc)}")) from None


def one_line(text: str, limit: int = 2000) -> str:
    """`text` as one printable line: control characters (newlines included) escaped,
    at most `limit` characters (user input such as an unknown key can be anything)."""
    shown = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    # Drop the discriminator tag pydantic inserts (e.g. 'quadrature') from the location.
    loc = [_short(str(p)) for p in err["loc"]]
    if loc and loc[0] in KIND_NAMES:
        loc = loc[1:]
    msg = err["msg"].removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if err["type"] == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_HINTS:
        msg = f"{_short(repr(err.get('input')))}: {PATTERN_HINTS[ctx['pattern']]}"
    elif err["type"] in ("less_than_equal", "less_than") and ctx.get("le") in BOUND_HINTS:
        msg = f"{_short(repr(err.get('input')))} is {BOUND_HINTS[ctx['le']]}"
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "union_tag_invalid":
        msg = f"unknown kind {err.get('input')!r}; expected one of {', '.join(KIND_NAMES)}"
    elif err["type"] == "union_tag_not_found":
        msg = "missing field 'kind'"
    field = ".".join(loc) if loc else "(top level)"
    return f"field '{field}': {msg}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def overridable_fields(model) -> dict[str, str]:
    """Map CLI option (e.g. ``--seeds``) to the dotted field path it overrides."""
    found: dict[str, str] = {}

    def walk(obj, prefix: str):
        for name, info in type(obj).model_fields.items():
            extra = info.json_schema_extra
            if isinstance(extra, dict) and "overridable" in extra:
                found[extra["overridable"]] = prefix + name
            child = getattr(obj, name)
            if isinstance(child, BaseModel):
                walk(child, prefix + name + ".")

    walk(model, "")
    return found


def apply_overrides(loaded: LoadedProtocol, options: dict[str, Any]) -> LoadedProtocol:
    """Apply CLI options ({'--seeds': 5000, ...}; None values ignored). Refuses an option
    the protocol does not mark overridable, and re-validates the result."""
    options = {k: v for k, v in options.items() if v is not None}
    if not options:
        return loaded
    allowed = overridable_fields(loaded.model)
    data = loaded.model.model_dump(mode="json")
    applied: dict[str, Any] = {}
    for option, value in options.items():
        if option not in allowed:
            names = ", ".join(sorted(allowed)) or "none"
            raise UsageError(
                f"{loaded.path}: option {option} cannot override a {loaded.kind} "
                f"protocol (overridable options: {names})"
            )
        dotted = allowed[option]
        parent = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            parent = parent[part]
        parent[parts[-1]] = value
        applied[dotted] = value
    model = validate(data, f"{loaded.path} (with command-line overrides)")
    return LoadedProtocol(loaded.path, loaded.source, model, loaded.hash, applied)


def json_schema() -> dict[str, Any]:
    return _ADAPTER.json_schema()


def exact_int(text: str, option: str) -> int:
    """Parse '5000', '5e3' or '2e6' as an exact non-negative integer (no rounding)."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        raise UsageError(f"{option}: {text!r} is not a number") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise UsageError(f"{option}: {text!r} is not an exact integer")
    if value < 0:
        raise UsageError(f"{option}: {text!r} must not be negative")
    if value.adjusted() > 100:  # far past every bound of the schema; int() would be slow
        raise UsageError(f"{option}: {text!r} is too large")
    return int(value)
