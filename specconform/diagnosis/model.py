"""Typed diagnosis records: where a failed or inconclusive test differs.

A :class:`Diagnosis` is computed from an archive alone (its rows' detail records and its
raw files, :mod:`specconform.diagnosis.compute`), so `run`, `gate`, `verify`, `report`,
the JUnit file and the pytest plugin all show the same text offline. Its ``lines()`` are
short on purpose: CI systems show a failure message in a few lines, and the pytest plugin
caps its message at 20.
"""

from __future__ import annotations

from dataclasses import dataclass

# How many cells / offenders a diagnosis keeps: enough to point at the bug, few enough
# for a JUnit message and a 20-line pytest assertion.
TOP_CELLS = 5
TOP_OFFENDERS = 3
STREAM_TOKENS = 8


@dataclass(frozen=True)
class Cell:
    """One cell of a χ² table by its contribution (O - E)² / E to the statistic."""

    label: str  # token id (with decoded text when known), or "acc:5" / "rej:5"
    observed: float
    expected: float
    contribution: float  # (O - E)^2 / E; inf for an observation on an expected-0 cell
    residual: float  # standardized (O - E) / sqrt(E); inf likewise

    def text(self) -> str:
        return (
            f"{self.label}: observed {self.observed:g}, expected {self.expected:.3g}, "
            f"residual {self.residual:+.2f}"
        )


@dataclass(frozen=True)
class Stratum:
    """The stratum that contributes most to a stratified test, with its top cells."""

    where: str  # "t1=5" / "t1=5, t2=7" / "group async"
    position: str  # which generated token the cells are: "token index 1 (t2)"
    statistic: float | None
    df: float | None
    pvalue: float | None
    n: int
    cells: tuple[Cell, ...]

    def text(self) -> str:
        stat = "—" if self.statistic is None else f"{self.statistic:.4g}"
        p = "—" if self.pvalue is None else f"{self.pvalue:.3g}"
        return f"stratum {self.where} ({self.position}): chi2={stat} df={self.df} p={p} n={self.n}"


@dataclass(frozen=True)
class Offender:
    """An observation of reference probability 0: which request, seed, position, token,
    with the reference's p and the draft law's q of that token (None: not recorded)."""

    group: str
    request: int  # the row of the group's requests (0-based, in seed order)
    seed: int
    position: int  # token index in the generated sequence (0 = t1)
    token: int
    prefix: tuple[int, ...]  # the generated tokens before it
    p: float
    q: float | None
    label: str = ""  # the token with decoded text when known

    def text(self) -> str:
        q = "not recorded (replay measures it)" if self.q is None else f"{self.q:.4g}"
        return (
            f"group {self.group} request {self.request} seed {self.seed} position "
            f"{self.position} token {self.label or self.token} after {list(self.prefix)}: "
            f"p={self.p:g} q={q}"
        )


@dataclass(frozen=True)
class Divergence:
    """The first position where the engine's tokens differ from the reference's."""

    case: str  # "prompt 3" / "request 12"
    seed: int | None
    position: int
    engine: tuple[int, ...]  # the engine's tokens from `position` on (STREAM_TOKENS)
    reference: tuple[int, ...]
    note: str = ""

    def text(self) -> str:
        seed = "" if self.seed is None else f" seed {self.seed}"
        return (
            f"{self.case}{seed} position {self.position}: engine {list(self.engine)} vs "
            f"reference {list(self.reference)}" + (f" ({self.note})" if self.note else "")
        )


@dataclass(frozen=True)
class Diagnosis:
    """Where one non-passing deciding row (FAIL, NO_EVIDENCE, INCONCLUSIVE) differs."""

    test: str
    status: str
    reason: str
    configuration: str  # groups and their sampling configuration
    stratum: Stratum | None = None
    offenders: tuple[Offender, ...] = ()
    offender_count: int = 0
    divergences: tuple[Divergence, ...] = ()
    note: str = ""  # what else is known (e.g. the smallest-p group)
    archive: str = "ARCHIVE"  # how the replay hint names the archive

    def headline(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.test}: {self.status}{why}"

    def lines(self) -> list[str]:
        """The diagnosis as at most 1 + 1 + 1 + TOP_CELLS + TOP_OFFENDERS + 2 lines."""
        out = [self.headline()]
        if self.configuration:
            out.append(f"  configuration: {self.configuration}")
        if self.offenders:
            out.append(f"  {self.offender_count} observation(s) of reference probability 0; first:")
            out += [f"    {o.text()}" for o in self.offenders]
            out.append(
                f"  reproduce one: specconform replay {self.archive} --test {self.test} --case 0"
            )
        for d in self.divergences:
            out.append(f"  first divergence: {d.text()}")
        if self.stratum is not None:
            out.append(f"  {self.stratum.text()}; top cells by contribution:")
            out += [f"    {c.text()}" for c in self.stratum.cells]
        if self.note:
            out.append(f"  {self.note}")
        return out

    def text(self) -> str:
        return "\n".join(self.lines())
