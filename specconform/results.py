"""Result records shared by every protocol kind, the evidence writer and `verify`.

Imports no torch: a reviewer recomputes verdicts from raw data with numpy/scipy/pandas.
"""
from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ROLES = ("prerequisite", "primary", "secondary", "exploratory", "mechanism", "case")


@dataclass(frozen=True)
class TestRow:
    """One test's outcome. `passed` is None for exploratory rows that never decide."""

    __test__ = False  # not a pytest test class

    test: str
    role: str
    statistic: float
    df: float | None
    pvalue: float | None
    n: int
    alpha: float
    passed: bool | None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("statistic", "df", "pvalue"):
            row[key] = _finite_or_none(row[key])
        return row


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "PASS" or "FAIL"
    alpha: float
    rule: str
    failed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "alpha": self.alpha, "rule": self.rule,
                "failed": list(self.failed)}


@dataclass(frozen=True)
class Evaluation:
    tests: tuple[TestRow, ...]
    verdict: Verdict


def decide(tests: list[TestRow] | tuple[TestRow, ...], alpha: float,
           deciding_roles: tuple[str, ...], rule: str) -> Verdict:
    """PASS iff every test whose role is in `deciding_roles` passed."""
    failed = tuple(t.test for t in tests if t.role in deciding_roles and t.passed is False)
    return Verdict("FAIL" if failed else "PASS", alpha, rule, failed)


class RawData:
    """Read-only view of a run's raw files, keyed by path relative to the run root
    (e.g. ``raw/cases.json``). Built from a directory or from an archive's members."""

    def __init__(self, files: Mapping[str, bytes]):
        self._files = dict(files)

    def names(self) -> list[str]:
        return sorted(self._files)

    def bytes(self, name: str) -> bytes:
        try:
            return self._files[name]
        except KeyError:
            raise KeyError(f"raw data has no file {name!r}") from None

    def json(self, name: str) -> Any:
        return json.loads(self.bytes(name))

    def csv(self, name: str):
        import pandas as pd

        return pd.read_csv(io.BytesIO(self.bytes(name)))


def _finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
