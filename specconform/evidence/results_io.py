"""The per-test tables and verdict files of a run: one writer, and the CSV reader `verify`
uses to check that `results/tests.csv` states the same as `results/tests.json`.

- `results/tests.json`: a JSON list of `TestRow.to_json()` objects (detail as an object).
- `results/tests.csv`: the same rows; columns test, role, statistic, df, pvalue, n,
  alpha, passed, status, adjusted_pvalue, detail (status and adjusted_pvalue since
  results schema 2); numbers in Python's round-trip repr, missing values empty, passed
  as true/false/empty, detail a JSON string.
- `verdict.json`: `Verdict.to_json()`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from specconform.details.distribution import SequentialDetail
from specconform.evidence.jsonio import canonical_json_bytes, compact_json, write_bytes_atomic
from specconform.protocol.schema_sequential import SEQUENTIAL_TEST_NAME as SEQUENTIAL_TEST
from specconform.results import Evaluation, TestRow
from specconform.util.errors import EvidenceError

CSV_COLUMNS = (
    "test",
    "role",
    "statistic",
    "df",
    "pvalue",
    "n",
    "alpha",
    "passed",
    "status",
    "adjusted_pvalue",
    "detail",
)


def write_results(run_dir: Path, evaluation: Evaluation) -> None:
    """Write results/tests.json, results/tests.csv and verdict.json for `evaluation`."""
    run_dir = Path(run_dir)
    rows = [row.to_json() for row in evaluation.tests]
    write_bytes_atomic(run_dir / "results" / "tests.json", canonical_json_bytes(rows))
    write_bytes_atomic(run_dir / "results" / "tests.csv", tests_csv_bytes(evaluation.tests))
    write_bytes_atomic(run_dir / "verdict.json", canonical_json_bytes(evaluation.verdict.to_json()))


def tests_csv_bytes(tests: tuple[TestRow, ...] | list[TestRow]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in tests:
        data = row.to_json()
        writer.writerow(
            [
                data["test"],
                data["role"],
                _num(data["statistic"]),
                _num(data["df"]),
                _num(data["pvalue"]),
                data["n"],
                _num(data["alpha"]),
                _bool(data["passed"]),
                data["status"],
                _num(data["adjusted_pvalue"]),
                compact_json(data["detail"]),
            ]
        )
    return out.getvalue().encode()


def read_tests_csv(data: bytes) -> list[dict]:
    """Rows of results/tests.csv with numbers and booleans parsed (None where empty)."""
    # A detail column passes csv's default field limit of 128 KiB at 10^6 seeds (t3's
    # strata: 0.25 MB); the member itself is within the reader's held bound, so no field
    # can be longer than it. The limit is process-wide: restored after.
    previous = csv.field_size_limit(max(len(data), 1 << 17))
    try:
        return _tests_csv_rows(data)
    finally:
        csv.field_size_limit(previous)


def _tests_csv_rows(data: bytes) -> list[dict]:
    try:
        reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
        rows = []
        for raw in reader:
            rows.append(
                {
                    "test": raw["test"],
                    "role": raw.get("role"),
                    "statistic": _parse_float(raw.get("statistic")),
                    "df": _parse_float(raw.get("df")),
                    "pvalue": _parse_float(raw.get("pvalue")),
                    "n": None if not raw.get("n") else int(float(raw["n"])),
                    "passed": _parse_bool(raw.get("passed")),
                    "status": raw.get("status") or None,
                    "adjusted_pvalue": _parse_float(raw.get("adjusted_pvalue")),
                }
            )
        return rows
    except (KeyError, ValueError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"results/tests.csv: malformed ({exc})") from None


def _num(value) -> str:
    return "" if value is None else repr(float(value))


def _bool(value) -> str:
    return "" if value is None else ("true" if value else "false")


def _parse_float(text: str | None) -> float | None:
    if text is None or text.strip() == "" or text.strip().lower() == "nan":
        return None
    return float(text)


def _parse_bool(text: str | None) -> bool | None:
    if text is None or text.strip() == "":
        return None
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"passed is {text!r}, not a boolean")


SEQUENTIAL_CSV = "results/sequential.csv"
SEQUENTIAL_COLUMNS = ("batch", "seeds", "log_e", "sup_log_e")


def sequential_csv_bytes(tests: tuple[TestRow, ...] | list[TestRow]) -> bytes | None:
    """results/sequential.csv of a sequential run: the e-process after each batch (seeds
    per group so far, log E, running max of log E; empty = infinite: an observation of
    reference probability 0). None for a fixed-N run (no e-process row)."""
    row = next((t for t in tests if t.test == SEQUENTIAL_TEST), None)
    if row is None:
        return None
    if not isinstance(row.detail, SequentialDetail):
        raise EvidenceError(f"test {SEQUENTIAL_TEST}: detail carries no e-process trajectory")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SEQUENTIAL_COLUMNS)
    for k, point in enumerate(row.detail.trajectory, start=1):
        writer.writerow(
            [k, point.seeds]
            + ["" if x is None else repr(x) for x in (point.log_e, point.sup_log_e)]
        )
    return out.getvalue().encode()
