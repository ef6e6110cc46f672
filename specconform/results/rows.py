"""A test's outcome: the frozen :class:`TestRow`, its roles and statuses, and the one
number rule of every evidence file (:func:`json_number`). See the package docstring for
``status``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from specconform.details import Detail, JsonDetail, parse_detail


def json_number(x: Any) -> float | None:
    """``float(x)`` if finite, else None (JSON has no inf/NaN). The one number rule of
    every evidence file; defined here, below the evidence layer that re-exports it
    (`specconform.evidence.jsonio`), so that results never imports evidence."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


ROLES = (
    "prerequisite",
    "primary",
    "secondary",
    "exploratory",
    "mechanism",
    "case",
    "conformance",
)
PASS, FAIL, NO_EVIDENCE, INFO = "PASS", "FAIL", "NO_EVIDENCE", "INFO"
STATUSES = (PASS, FAIL, NO_EVIDENCE, INFO)


@dataclass(frozen=True)
class Decision:
    """How one row came out: its ``status``, the schema-1 ``passed`` flag (None for a row
    that does not decide) and ``reason`` (why it failed or had no evidence; "" else).
    Kinds decide this triple in their own words; :meth:`TestRow.decided` then builds the
    row, so the field order of TestRow is written once."""

    status: str
    passed: bool | None
    reason: str = ""


@dataclass(frozen=True)
class TestRow:
    """One test's outcome (see the module docstring for ``status``)."""

    __test__ = False  # not a pytest test class

    test: str
    role: str
    statistic: float | None
    df: float | None
    pvalue: float | None
    n: int
    alpha: float
    passed: bool | None
    detail: Detail = field(default_factory=JsonDetail)
    status: str = ""  # derived from `passed` when empty (schema-1 rows)
    pvalue_method: str = ""  # what `pvalue` is: "chi2", "exact binomial", "Bonferroni ..."
    adjusted_pvalue: float | None = None  # family-adjusted p (deciding stochastic tests)
    adjusted_method: str = ""  # "Holm" | "Bonf": the adjusted p reads p_Holm / p_Bonf
    deciding: bool = False  # whether the verdict reads this row
    reason: str = ""  # why a deciding row failed: "no evidence", "engine errors", ...

    def __post_init__(self):
        if isinstance(self.detail, Mapping) or not callable(getattr(self.detail, "to_json", None)):
            # No untyped dict crosses a module boundary: a kind without records of its
            # own wraps its JSON object in JsonDetail explicitly.
            raise TypeError(
                f"test {self.test}: detail is {type(self.detail).__name__}, not a detail "
                "record (specconform.details; JsonDetail for a kind without records)"
            )
        if not self.status:
            derived = INFO if self.passed is None else (PASS if self.passed else FAIL)
            object.__setattr__(self, "status", derived)
        if self.status not in STATUSES:
            raise ValueError(f"test {self.test}: status {self.status!r} not in {STATUSES}")

    @classmethod
    def decided(
        cls,
        test: str,
        role: str,
        statistic: float | None,
        n: int,
        alpha: float,
        detail: Detail,
        method: str,
        decision: Decision,
        *,
        df: float | None = None,
        pvalue: float | None = None,
    ) -> TestRow:
        """A row as its kind decided it: ``decision``'s status, passed and reason, with
        ``method`` naming what ``pvalue`` is (or why there is none)."""
        return cls(
            test,
            role,
            statistic,
            df,
            pvalue,
            n,
            alpha,
            decision.passed,
            detail,
            status=decision.status,
            pvalue_method=method,
            reason=decision.reason,
        )

    def to_json(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["detail"] = self.detail.to_json()
        for key in ("statistic", "df", "pvalue", "adjusted_pvalue"):
            row[key] = json_number(row[key])
        return row

    @classmethod
    def from_json(
        cls, row: Mapping[str, Any], kind: str | None = None, *, schema: int = 2
    ) -> TestRow:
        """A row read back from results/tests.json (either schema); ``detail`` may be a
        JSON string (tests.csv) and is read as the record of the archive's ``kind`` (see
        :func:`specconform.details.parse_detail`). Raises KeyError/TypeError/ValueError
        (DetailError is one) on a malformed row."""
        raw_detail = row.get("detail") or {}
        if isinstance(raw_detail, str):
            raw_detail = json.loads(raw_detail)
        detail = parse_detail(raw_detail, kind, schema=schema)
        passed = row.get("passed")
        if passed is not None and not isinstance(passed, bool):
            raise TypeError(f"passed is {passed!r}, not a boolean")
        return cls(
            test=str(row["test"]),
            role=str(row["role"]),
            statistic=_float(row.get("statistic")),
            df=_float(row.get("df")),
            pvalue=_float(row.get("pvalue")),
            n=int(row["n"]),
            alpha=float(row["alpha"]),
            passed=passed,
            detail=detail,
            status=str(row.get("status") or ""),
            pvalue_method=str(row.get("pvalue_method") or ""),
            adjusted_pvalue=_float(row.get("adjusted_pvalue")),
            adjusted_method=str(row.get("adjusted_method") or ""),
            deciding=bool(row.get("deciding", False)),
            reason=str(row.get("reason") or ""),
        )


def _float(value) -> float | None:
    return None if value is None else float(value)
