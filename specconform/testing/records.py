"""What every specconform assertion records: one typed `CheckRecord` per check, the
failure message built from it, and the per-test collector the pytest plugin reads."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class CheckRecord:
    """One statistical or deterministic check made by an assertion."""

    check: str  # "assert_law", "assert_sampler_exact", ...
    name: str  # the test row, e.g. "single_draft_pos0_joint"
    passed: bool
    statistic: float | None
    df: float | None
    pvalue: float | None
    n: int
    alpha: float
    seeds: str  # how the randomness was seeded, e.g. "PCG64((0, case))"
    detectable_tv: float | None  # every law this far from the null is caught, power 0.8
    note: str = ""
    archive: str | None = None  # an evidence archive behind the check, if any
    inconclusive: bool = False  # no evidence (df 0): not a pass, not a shown failure
    nodeid: str | None = None  # the pytest test that made it (set by the plugin)

    def line(self) -> str:
        """statistic, df, p, n, seeds and detectable TV on one line."""
        return (
            f"{self.name}: {self.status} "
            f"statistic={_num(self.statistic)} df={_num(self.df)} p={_p(self.pvalue)} "
            f"n={self.n} alpha={self.alpha:.3g} seeds={self.seeds} "
            f"detectable_tv={_num(self.detectable_tv)}" + (f" ({self.note})" if self.note else "")
        )

    @property
    def status(self) -> str:
        return "PASS" if self.passed else ("NO_EVIDENCE" if self.inconclusive else "FAIL")

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("statistic", "df", "pvalue", "detectable_tv"):
            value = row[key]
            row[key] = value if value is None or math.isfinite(value) else str(value)
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> CheckRecord:
        """The inverse of :meth:`to_json` (non-finite numbers come back as floats): how
        the plugin carries a record from a pytest-xdist worker to the controller."""
        values = dict(row)
        for key in ("statistic", "df", "pvalue", "detectable_tv"):
            if isinstance(values.get(key), str):
                values[key] = float(values[key])
        return cls(**values)


@dataclass
class Collector:
    """Records of the running test (the plugin sets `nodeid`) and of the session."""

    nodeid: str | None = None
    records: list[CheckRecord] = field(default_factory=list)

    def add(self, record: CheckRecord) -> CheckRecord:
        if self.nodeid is not None:
            from dataclasses import replace

            record = replace(record, nodeid=self.nodeid)
        self.records.append(record)
        return record


COLLECTOR = Collector()


# A failure message is read in a CI log or a pytest report: at most this many lines of
# at most this many characters (the failing rows first, then where they differ).
MAX_MESSAGE_LINES = 20
MAX_LINE_CHARS = 240


def fail_message(
    check: str, records: list[CheckRecord], header: str, details: tuple[str, ...] = ()
) -> str:
    """The failing checks' numbers, then ``details`` (e.g. the diagnosis lines of
    specconform.diagnosis), bounded by :func:`bounded`."""
    failed = [r for r in records if not r.passed]
    lines = [f"{check}: {header}", *(f"  {r.line()}" for r in failed)]
    passed = len(records) - len(failed)
    if passed:
        lines.append(f"  ({passed} other checks passed)")
    lines += [f"  {d}" for d in details]
    return bounded("\n".join(lines))


def bounded(text: str, lines: int = MAX_MESSAGE_LINES, chars: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to ``lines`` lines of ``chars`` characters, saying what was cut."""
    rows = [_cut(r, chars) for r in text.splitlines()]
    if len(rows) > lines:
        rows = [
            *rows[: lines - 1],
            f"  ... {len(rows) - lines + 1} more lines (the archive has all)",
        ]
    return "\n".join(rows)


def _cut(line: str, chars: int) -> str:
    if len(line) <= chars:
        return line
    suffix = f" ... (+{len(line)} chars in all)"
    return line[: chars - len(suffix)] + suffix


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.6g}"


def _p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.4g}" if p >= 1e-4 else f"{p:.3e}"
