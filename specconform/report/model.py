"""What a report shows, read once from the archives and rendered as Markdown or HTML.

Reports read archives without verifying them (that is `specconform verify`'s job, and
the report says so). They rely on these fields, all optional except the first three:

- run.json: `run_id`, `protocol_name`, `protocol_hash`; `kind`, `mutant`, `device`,
  `overrides`, and `seed_ranges` = {group: [start, stop)};
- results/tests.json rows and verdict.json (contracts section 3);
- a test row's typed `detail` record (specconform.details), read through the shapes
  of :mod:`specconform.report.readings`: `group` (per-group tables), the coverage
  row's `tests` (scope notes), and the plot inputs read by `plots`
  (`observed`/`expected`, `strata`, `acceptance_ratio`).

Typed readings of a row for every renderer: :func:`outcome` (from the row's status: a
row without evidence reads "no evidence", never PASS), :func:`pvalue_text` (the raw p
named by what it is, "p_Bonf" for a combination over groups, with each group's p, and
the family-adjusted "p_Holm"/"p_Bonf" of a deciding test), :func:`statistic_text` (the
quadrature statistic is max(error / bound), named so) and :func:`acceptance_point`
(observed and expected first-position acceptance ratio, from the keys the distribution
evaluator writes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specconform.evidence.reader import read_archive
from specconform.evidence.sha256sums import ATTESTATION_NAME
from specconform.report.readings import (
    acceptance_ratio,
    coverage_of,
    covered_tests,
    group_of,
    group_pvalues,
    is_quadrature_case,
)
from specconform.results import FAIL, NO_EVIDENCE, PASS, Evaluation, TestRow, Verdict
from specconform.util.errors import EvidenceError

SeedRange = tuple[int, int]  # [start, stop)


PLAN_FILE = "results/plan.json"


@dataclass(frozen=True)
class ArchiveView:
    label: str  # "primary", "replication", "replication 2", ...
    path: Path
    run_id: str
    sha256: str
    run: dict
    evaluation: Evaluation
    signed: bool
    seed_ranges: dict[str, SeedRange]
    # results/plan.json: the detectable TV of each deciding test at the run's seeds
    # (power 0.99); empty for kinds without a plan and for archives that predate it.
    plan: tuple[dict, ...] = ()

    def row(self, test: str) -> TestRow | None:
        return next((r for r in self.evaluation.tests if r.test == test), None)


@dataclass(frozen=True)
class SeedOverlap:
    first: str  # archive label
    first_group: str
    first_range: SeedRange
    second: str
    second_group: str
    second_range: SeedRange


def load_views(archives: Sequence[Path]) -> list[ArchiveView]:
    """Read every archive; the first is the primary run, the others replications."""
    if not archives:
        raise EvidenceError("no archives to report on")
    views = []
    for index, path in enumerate(archives):
        contents = read_archive(Path(path))
        run = contents.json_object("run.json")
        views.append(
            ArchiveView(
                label=_label(index),
                path=Path(path),
                run_id=str(run.get("run_id", contents.top)),
                sha256=contents.sha256,
                run=run,
                evaluation=contents.evaluation(),
                signed=ATTESTATION_NAME in contents.files,
                seed_ranges=_seed_ranges(run.get("seed_ranges"), contents.path),
                plan=_plan(contents),
            )
        )
    return views


def _plan(contents) -> tuple[dict, ...]:
    if PLAN_FILE not in contents.files:
        return ()
    data = contents.json(PLAN_FILE)
    tests = data.get("tests") if isinstance(data, dict) else None
    return tuple(t for t in tests or () if isinstance(t, dict))


def detectable_tv_line(views: Sequence[ArchiveView], letters: Sequence[str]) -> str:
    """One line: each archive's detectable TV per deciding test (power 0.99)."""
    parts = []
    for view, letter in zip(views, letters, strict=True):
        if view.plan:
            tvs = ", ".join(f"{t.get('test')} {_tv(t.get('detectable_tv'))}" for t in view.plan)
            parts.append(f"{letter}: {tvs}")
    return (
        (
            "Detectable TV at power 0.99 (per deciding stratum, at the run's seeds) — "
            + "; ".join(parts)
        )
        if parts
        else ""
    )


def _tv(x) -> str:
    return "n/a (no evidence)" if x is None or not math.isfinite(x) else f"{x:.3g}"


def _label(index: int) -> str:
    return "primary" if index == 0 else ("replication" if index == 1 else f"replication {index}")


def _seed_ranges(raw, path: Path) -> dict[str, SeedRange]:
    if raw is None:
        return {}
    try:
        ranges = {}
        for group, (start, stop) in raw.items():
            start, stop = int(start), int(stop)
            if stop < start:
                raise ValueError(f"{group}: stop < start")
            ranges[str(group)] = (start, stop)
        return ranges
    except (AttributeError, TypeError, ValueError) as exc:
        raise EvidenceError(f"{path}: run.json seed_ranges malformed ({exc})") from None


def ordered_test_names(views: Sequence[ArchiveView]) -> list[str]:
    """Every test name, in the primary's order, then new ones from replications."""
    names: list[str] = []
    for view in views:
        names.extend(r.test for r in view.evaluation.tests if r.test not in names)
    return names


def role_of(views: Sequence[ArchiveView], test: str) -> str:
    return next((r.role for v in views if (r := v.row(test)) is not None), "")


def groups(views: Sequence[ArchiveView]) -> dict[str, list[str]]:
    """{group: its tests} for rows whose detail carries a `group`, in first-seen order."""
    found: dict[str, list[str]] = {}
    for view in views:
        for row in view.evaluation.tests:
            group = group_of(row.detail)
            if group is None:
                continue
            tests = found.setdefault(str(group), [])
            if row.test not in tests:
                tests.append(row.test)
    return found


def cross_archive_overlaps(views: Sequence[ArchiveView]) -> list[SeedOverlap]:
    """Every pair of seed ranges from two different archives that share a seed."""
    overlaps = []
    for i, a in enumerate(views):
        for b in views[i + 1 :]:
            for ga, ra in sorted(a.seed_ranges.items()):
                for gb, rb in sorted(b.seed_ranges.items()):
                    if max(ra[0], rb[0]) < min(ra[1], rb[1]):
                        overlaps.append(SeedOverlap(a.label, ga, ra, b.label, gb, rb))
    return overlaps


def format_pvalue(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return f"{p:.4f}" if p >= 1e-3 else f"{p:.2e}"


def format_number(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.6g}"


def outcome(row: TestRow) -> str:
    """PASS / FAIL / "no evidence", or "info" for rows that never decide (exploratory)."""
    if row.status == NO_EVIDENCE and row.reason.startswith("not applicable"):
        return f"no evidence ({row.reason})"  # e.g. acceptance on an adapter without q
    return {PASS: "PASS", FAIL: "FAIL", NO_EVIDENCE: "no evidence"}.get(row.status, "info")


def pvalue_text(row: TestRow) -> str:
    """The row's p-values named by what they are: ``p=…``, or ``p_Bonf=…`` with each
    group's p for a combination over groups, then ``p_Holm=…`` when the verdict adjusted
    it; ``p=n/a`` when there is none."""
    combined = {"Bonferroni over": "p_Bonf", "Simes over": "p_Simes"}
    label = next((v for k, v in combined.items() if row.pvalue_method.startswith(k)), "p")
    text = f"{label}={format_pvalue(row.pvalue)}"
    per_group = group_pvalues(row.detail)
    if label != "p" and per_group:
        groups = ", ".join(f"{g} p={format_pvalue(p)}" for g, p in per_group)
        text += f" ({groups})"
    if row.adjusted_pvalue is not None:
        text += f", p_{row.adjusted_method or 'adj'}={format_pvalue(row.adjusted_pvalue)}"
    return text


def statistic_text(row: TestRow) -> str:
    """``stat=…``, or for a quadrature case ``max err/bound=…`` (<= 1 is within bound)."""
    is_case = is_quadrature_case(row.detail)
    return f"{'max err/bound' if is_case else 'stat'}={format_number(row.statistic)}"


@dataclass(frozen=True)
class AcceptancePoint:
    """Observed first-position acceptance ratio of a test row and its exact value."""

    test: str
    observed: float
    expected: float | None


def acceptance_point(row: TestRow) -> AcceptancePoint | None:
    """From the `acceptance_ratio`/`expected_acceptance_ratio` of an acceptance row
    (None for rows without them, e.g. schema-1 archives)."""
    ratio = acceptance_ratio(row.detail)
    if ratio is None:
        return None
    return AcceptancePoint(row.test, *ratio)


def check_cell(row: TestRow | None) -> str:
    """A formal-checks cell: p-value and outcome; an em dash if the archive lacks the test."""
    if row is None:
        return "—"
    if row.pvalue is None and row.statistic is not None and row.status != NO_EVIDENCE:
        # Deterministic checks (quadrature) decide on a statistic against a bound.
        return f"{statistic_text(row)} {outcome(row)}"
    if row.status == NO_EVIDENCE and row.reason and not row.reason.startswith("no evidence"):
        # Why there is none, when it is not the plain "no evidence" (a sequence check
        # the adapter cannot run: "not applicable: <why>").
        return f"{pvalue_text(row)} {outcome(row)} ({row.reason})"
    return f"{pvalue_text(row)} {outcome(row)}"


def detail_cell(row: TestRow | None) -> str:
    """A per-group cell: statistic, df, n, p-value and outcome."""
    if row is None:
        return "—"
    df = "" if row.df is None else f", df={format_number(row.df)}"
    return f"{statistic_text(row)}{df}, n={row.n}, {pvalue_text(row)} {outcome(row)}"


def verdict_statement(verdict: Verdict) -> str:
    """The verdict's stated false-fail rate, or what a schema-1 archive could state; an
    INCONCLUSIVE verdict (schema 3) adds the deciding tests that had no evidence."""
    if verdict.inconclusive:
        return (
            f"{verdict.statement or 'no family-wise rate stated'}; INCONCLUSIVE: no evidence "
            f"for {', '.join(verdict.inconclusive)} (too few seeds; not a failure shown)"
        )
    if verdict.statement:
        return verdict.statement
    return (
        f"each deciding test at alpha {format_number(verdict.alpha)} (results schema 1: "
        "no family-wise rate stated)"
    )


def format_range(r: SeedRange | None) -> str:
    return "—" if r is None else f"[{r[0]}, {r[1]})"


def disjointness_statement(views: Sequence[ArchiveView]) -> str:
    """One explicit sentence on whether the archives' seed ranges are disjoint."""
    if len(views) < 2:
        return "One archive: there is no second run whose seeds could overlap."
    missing = [v.label for v in views if not v.seed_ranges]
    if missing:
        return (
            "Disjointness cannot be stated: run.json of "
            f"{', '.join(missing)} records no seed ranges."
        )
    overlaps = cross_archive_overlaps(views)
    if not overlaps:
        return "The seed ranges of the archives are disjoint: no seed is used by two runs."
    pairs = "; ".join(
        f"{o.first} {o.first_group} {format_range(o.first_range)} and "
        f"{o.second} {o.second_group} {format_range(o.second_range)}"
        for o in overlaps
    )
    return f"The seed ranges of the archives are NOT disjoint: {pairs} overlap."


def coverage_notes(views: Sequence[ArchiveView]) -> list[str]:
    """One line per test row that reports a `coverage` in its detail, and one per test
    of a coverage row (strata and share per stratified test)."""
    notes = []
    for view in views:
        for row in view.evaluation.tests:
            coverage = coverage_of(row.detail)
            if coverage is not None:
                notes.append(f"{view.label}, {row.test}: {format_coverage(coverage)}")
            for test, cov in sorted(covered_tests(row.detail).items()):
                share = cov.share if cov.share is not None else 0.0
                notes.append(
                    f"{view.label}, {test}: {cov.strata} strata cover "
                    f"{cov.n_covered}/{cov.n_eligible} samples ({100 * share:.1f}%)"
                )
    return notes


def format_coverage(coverage) -> str:
    if isinstance(coverage, dict):
        return ", ".join(f"{k}={format_coverage(v)}" for k, v in sorted(coverage.items()))
    if isinstance(coverage, float):
        return format_number(coverage)
    return str(coverage)


def scope_lines(view: ArchiveView) -> list[str]:
    """What the run covered: protocol, kind, engine configuration knobs, decision rule."""
    run, verdict = view.run, view.evaluation.verdict
    overrides = run.get("overrides") or {}
    lines = [
        f"protocol {run.get('protocol_name', '?')} (hash {str(run.get('protocol_hash', '?'))[:16]}), "
        f"kind {run.get('kind', '?')}, device {run.get('device', '?')}, "
        f"mutant {run.get('mutant') or 'none'}",
        f"overrides: {', '.join(f'{k}={v}' for k, v in sorted(overrides.items())) or 'none'}",
        f"decision rule (alpha {format_number(verdict.alpha)}): {verdict.rule or 'not stated'}",
        f"verdict: {verdict_statement(verdict)}",
    ]
    exploratory = [r.test for r in view.evaluation.tests if r.status == "INFO"]
    if exploratory:
        lines.append(f"not deciding (exploratory): {', '.join(exploratory)}")
    return lines
