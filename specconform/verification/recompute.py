"""Recomputing a run's tests from its raw data and comparing with what the archive states.

The protocol kind's `specconform.kinds.reevaluate(protocol, raw) -> Evaluation` (torch-free)
runs on the archive's `protocol.json` and raw/ members: this package sits above the kinds
layer, so it imports them plainly (the archive reading below it, in `evidence`, does not). Every test row must match `results/tests.json`: the same tests, role, n, passed,
statistic/df/pvalue/alpha within a relative tolerance of 1e-9, and the same detail
(numbers within the same tolerance); `results/tests.csv` must state the same rows as the
JSON; and the recomputed verdict must equal `verdict.json`. The first difference raises
EvidenceError naming the file and field.

Two results schemas (`specconform.results.RESULTS_SCHEMA`): an archive whose verdict.json
states `schema` >= 2 is compared on every field of schema 2 (status, adjusted p-value,
reasons, the family-wise statement, ...). An archive without it was written before
family-wise verdicts: `reevaluate` re-derives it with the frozen schema-1 evaluator and
the fields schema 1 has (`SCHEMA1_ROW_FIELDS`, `SCHEMA1_VERDICT_FIELDS`) are compared.
Schema 3 added the INCONCLUSIVE verdict (a deciding test without evidence) and
verdict.json's `inconclusive`; an archive of schema 2 is compared with the recomputed
verdict as schema 2 stated it (`Verdict.as_schema2`: such a test failed the verdict).
"""

from __future__ import annotations

import json
import math
from typing import Any

from specconform import kinds
from specconform.evidence.jsonio import compact_json
from specconform.evidence.reader import ArchiveContents
from specconform.evidence.results_io import (
    SEQUENTIAL_CSV,
    read_tests_csv,
    sequential_csv_bytes,
)
from specconform.results import Evaluation
from specconform.util.errors import EvidenceError

REL_TOL = 1e-9
TESTS_JSON = "results/tests.json"
TESTS_CSV = "results/tests.csv"
SCHEMA1_ROW_FIELDS = ("role", "statistic", "df", "pvalue", "n", "alpha", "passed", "detail")
SCHEMA2_ROW_FIELDS = SCHEMA1_ROW_FIELDS + (
    "status",
    "pvalue_method",
    "adjusted_pvalue",
    "adjusted_method",
    "deciding",
    "reason",
)
SCHEMA1_VERDICT_FIELDS = ("verdict", "failed", "alpha", "rule")
SCHEMA2_VERDICT_FIELDS = SCHEMA1_VERDICT_FIELDS + (
    "combine",
    "family_size",
    "statement",
    "reasons",
    "schema",
)
SCHEMA3_VERDICT_FIELDS = SCHEMA2_VERDICT_FIELDS + ("inconclusive",)


def reevaluate_archive(contents: ArchiveContents) -> Evaluation:
    """Run the kind's re-evaluation on the archive's protocol and raw data."""
    protocol = contents.json_object("protocol.json")
    try:
        # Looked up on each call: a plug-in kind may install its own (tests do).
        evaluation = kinds.reevaluate(protocol, contents.raw_data())
    except EvidenceError:
        raise
    except Exception as exc:  # any failure to recompute is a failure of the evidence
        raise EvidenceError(f"raw/: recomputation failed ({type(exc).__name__}: {exc})") from None
    if not isinstance(evaluation, Evaluation):
        raise EvidenceError("cannot recompute: reevaluate did not return an Evaluation")
    return evaluation


def check_recomputation(contents: ArchiveContents, recomputed: Evaluation) -> None:
    """Raise EvidenceError at the first difference between `recomputed` and the archive."""
    stated_verdict = contents.json_object("verdict.json")
    schema = stated_verdict.get("schema", 1)
    if schema == 2 and recomputed.verdict.schema == 3:  # the reading of its own schema
        order = tuple(r.test for r in recomputed.tests if r.deciding)
        recomputed = Evaluation(recomputed.tests, recomputed.verdict.as_schema2(order))
    if schema != recomputed.verdict.schema:
        raise EvidenceError(
            f"verdict.json: results schema {schema!r}, but the protocol "
            f"recomputes under schema {recomputed.verdict.schema}"
        )
    row_fields = SCHEMA1_ROW_FIELDS if schema == 1 else SCHEMA2_ROW_FIELDS
    stated = _by_test(contents.stated_rows(), TESTS_JSON)
    fresh = _by_test([_normalized(row.to_json()) for row in recomputed.tests], "recomputation")
    for name in stated:
        if name not in fresh:
            raise EvidenceError(f"{TESTS_JSON}: test {name} is stated but not recomputed")
    for name in fresh:
        if name not in stated:
            raise EvidenceError(f"{TESTS_JSON}: recomputed test {name} is missing")
    for name, row in fresh.items():
        for key in row_fields:
            stated_value = stated[name].get(key)
            if key == "detail" and isinstance(stated_value, str):
                stated_value = _loads(stated_value, f"{TESTS_JSON}: test {name} detail")
            where = _first_difference(stated_value, row[key], key)
            if where is not None:
                raise EvidenceError(
                    f"{TESTS_JSON}: test {name} field {where}: stated "
                    f"{_short(stated_value)}, recomputed {_short(row[key])}"
                )
    _check_csv(
        contents,
        stated,
        ("role", "statistic", "df", "pvalue", "n", "passed")
        + (() if schema == 1 else ("status", "adjusted_pvalue")),
    )
    _check_sequential(contents, recomputed)
    _check_verdict(
        stated_verdict,
        _normalized(recomputed.verdict.to_json()),
        {1: SCHEMA1_VERDICT_FIELDS, 2: SCHEMA2_VERDICT_FIELDS}.get(schema, SCHEMA3_VERDICT_FIELDS),
    )


def _check_csv(contents: ArchiveContents, stated: dict[str, dict], fields: tuple[str, ...]) -> None:
    if TESTS_CSV not in contents.files:
        raise EvidenceError(f"{TESTS_CSV}: missing from the archive")
    rows = read_tests_csv(contents.files[TESTS_CSV])
    if [r["test"] for r in rows] != list(stated):
        raise EvidenceError(f"{TESTS_CSV}: tests differ from {TESTS_JSON}")
    for row in rows:
        for key in fields:
            where = _first_difference(stated[row["test"]].get(key), row[key], key)
            if where is not None:
                raise EvidenceError(
                    f"{TESTS_CSV}: test {row['test']} field {where} differs from {TESTS_JSON}"
                )


def _check_sequential(contents: ArchiveContents, recomputed: Evaluation) -> None:
    """A sequential run's results/sequential.csv must be the recomputed trajectory (byte
    for byte: it is written from the same rows); a fixed-N run has none."""
    expected = sequential_csv_bytes(recomputed.tests)
    stated = contents.files.get(SEQUENTIAL_CSV)
    if expected is None and stated is not None:
        raise EvidenceError(f"{SEQUENTIAL_CSV}: present, but the protocol is not sequential")
    if expected is not None and stated != expected:
        what = "missing from the archive" if stated is None else "differs from the recomputed"
        raise EvidenceError(f"{SEQUENTIAL_CSV}: {what} e-process trajectory")


def _check_verdict(stated: dict, recomputed: dict, fields: tuple[str, ...]) -> None:
    for key in fields:
        where = _first_difference(stated.get(key), recomputed[key], key)
        if where is not None:
            raise EvidenceError(
                f"verdict.json: field {where}: stated "
                f"{_short(stated.get(key))}, recomputed {_short(recomputed[key])}"
            )


def _by_test(rows: list[dict], source: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for row in rows:
        name = row.get("test")
        if name in out:
            raise EvidenceError(
                f"{TESTS_JSON if source == TESTS_JSON else source}: test {name} appears twice"
            )
        out[name] = row
    return out


def _normalized(obj: Any) -> Any:
    """The value as it reads back from JSON (tuples become lists, keys strings)."""
    return json.loads(compact_json(obj))


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise EvidenceError(f"{what}: not valid JSON") from None


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    """Path of the first difference between JSON values `a` and `b`, or None if equal.

    Numbers (not booleans) compare within REL_TOL; NaN equals NaN; None equals NaN
    (tests.json writes non-finite numbers as null).
    """
    if _is_number(a) and _is_number(b):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return None
        return None if math.isclose(fa, fb, rel_tol=REL_TOL, abs_tol=0.0) else path
    if (a is None and _is_nan(b)) or (b is None and _is_nan(a)):
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}"
            where = _first_difference(a[key], b[key], f"{path}.{key}")
            if where is not None:
                return where
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length)"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            where = _first_difference(x, y, f"{path}[{index}]")
            if where is not None:
                return where
        return None
    return None if a == b and type(a) is type(b) else path


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _short(value: Any) -> str:
    text = compact_json(value)
    return text if len(text) <= 80 else text[:77] + "..."
