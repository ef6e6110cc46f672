"""Result records shared by every protocol kind, the evidence writer and `verify`.

A test returns a frozen :class:`TestRow` in the scipy style: ``statistic``, ``df``,
``pvalue`` (the p-value the decision used, named by ``pvalue_method``), ``n``, a
``status`` and, for deciding tests, the family-adjusted p-value (``adjusted_pvalue``,
e.g. Holm's). ``detail`` is the per-stratum record of the test: a typed frozen record
of :mod:`specconform.details` (numbers finite or None) whose ``to_json()`` is written to
the archive; reading a row back picks the record from the archive's kind.

Status, one of :data:`STATUSES`:

- ``PASS`` / ``FAIL``: the test had evidence and decided;
- ``NO_EVIDENCE``: nothing was testable (df 0, no stratum reached the threshold, every
  cell pooled into one); never a pass, and in a deciding role it makes the verdict
  INCONCLUSIVE (results schema 3; schema 2 read it as a FAIL, "no evidence");
- ``INFO``: reported, never decides (exploratory rows, coverage).

``passed`` stays for readers of the first archive schema: True for PASS, False for
FAIL and NO_EVIDENCE, None for INFO.

Imports no torch: a reviewer recomputes verdicts from raw data with numpy/scipy/pandas.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
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
# The verdict's third outcome (schema 3): no deciding test failed, but at least one had
# no evidence. Not a failure of the engine; `gate` counts it as one unless told otherwise.
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)
# The archive's results schema: 1 = before family-wise verdicts (no `status`, no
# `adjusted_pvalue`), 2 = family-wise verdicts, PASS/FAIL (a deciding test without
# evidence failed the verdict), 3 = this module: PASS/FAIL/INCONCLUSIVE, verdict.json
# lists the tests without evidence under `inconclusive`. Written into verdict.json as
# `schema`; `verify` reads each archive under the schema it states.
RESULTS_SCHEMA = 3


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


@dataclass(frozen=True)
class Verdict:
    """The protocol's decision. ``alpha`` is the family-wise false-fail rate the verdict
    holds (schema 2) or the per-test level (schema 1); ``statement`` says which, e.g.
    "false-fail rate <= 0.01 over 8 tests (Holm)"; ``reasons`` maps each failed test to
    why it failed ("p_Holm < alpha", "no evidence", "engine errors", ...).

    Schema 3: ``failed`` lists the deciding tests that failed with evidence (or broke a
    deterministic rule), ``inconclusive`` those without evidence; the verdict is FAIL if
    any failed, else INCONCLUSIVE if any had no evidence, else PASS. Schema 2 listed both
    under ``failed`` and said FAIL (:meth:`as_schema2`)."""

    verdict: str  # "PASS", "FAIL" or (schema 3) "INCONCLUSIVE"
    alpha: float
    rule: str
    failed: tuple[str, ...]
    combine: str = ""  # "holm" | "bonferroni" | "" (schema 1: each test at alpha)
    family_size: int = 0  # stochastic deciding tests the rate is taken over
    statement: str = ""
    reasons: tuple[tuple[str, str], ...] = ()
    schema: int = 1
    inconclusive: tuple[str, ...] = ()  # schema 3: deciding tests without evidence

    def to_json(self) -> dict[str, Any]:
        out = {
            "verdict": self.verdict,
            "alpha": self.alpha,
            "rule": self.rule,
            "failed": list(self.failed),
        }
        if self.schema >= 2:
            out.update(
                {
                    "combine": self.combine,
                    "family_size": self.family_size,
                    "statement": self.statement,
                    "reasons": dict(self.reasons),
                    "schema": self.schema,
                }
            )
        if self.schema >= 3:
            out["inconclusive"] = list(self.inconclusive)
        return out

    def as_schema2(self, order: tuple[str, ...]) -> Verdict:
        """This verdict as results schema 2 stated it (how `verify` reads an archive of
        schema 2): a test without evidence failed the verdict, and ``failed`` lists every
        not-passed deciding test in ``order`` (the deciding rows' order)."""
        if self.schema < 3:
            return self
        if not self.inconclusive:
            return replace(self, schema=2)
        bad = set(self.failed) | set(self.inconclusive)
        failed = tuple(t for t in order if t in bad)
        return replace(
            self, verdict=FAIL if failed else PASS, failed=failed, inconclusive=(), schema=2
        )

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Verdict:
        return cls(
            verdict=str(obj["verdict"]),
            alpha=float(obj["alpha"]),
            rule=str(obj.get("rule", "")),
            failed=tuple(obj.get("failed", ())),
            combine=str(obj.get("combine", "")),
            family_size=int(obj.get("family_size", 0)),
            statement=str(obj.get("statement", "")),
            reasons=tuple(sorted((obj.get("reasons") or {}).items())),
            schema=int(obj.get("schema", 1)),
            inconclusive=tuple(obj.get("inconclusive", ())),
        )


@dataclass(frozen=True)
class Evaluation:
    tests: tuple[TestRow, ...]
    verdict: Verdict


def decide(
    tests: list[TestRow] | tuple[TestRow, ...],
    alpha: float,
    deciding_roles: tuple[str, ...],
    rule: str,
) -> Verdict:
    """Schema-1 rule: PASS iff every test whose role is in `deciding_roles` passed, each
    at its own level (no family-wise statement). Kept for the toy kind of the evidence
    tests and for archives written before family-wise verdicts; protocol kinds use
    :func:`specconform.kinds.verdict.family_verdict`."""
    failed = tuple(t.test for t in tests if t.role in deciding_roles and t.passed is False)
    return Verdict("FAIL" if failed else "PASS", alpha, rule, failed)


class RawData:
    """Read-only view of a run's raw files, keyed by path relative to the run root
    (e.g. ``raw/cases.json``). Built from a directory or from an archive's members."""

    def __init__(self, files: Mapping[str, bytes]):
        self._files = dict(files)

    def names(self) -> list[str]:
        return sorted(self._files)

    def has(self, name: str) -> bool:
        return name in self._files

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


def _float(value) -> float | None:
    return None if value is None else float(value)
