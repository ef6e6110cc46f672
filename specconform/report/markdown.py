"""The pull-request report in Markdown: archives side by side, ready to paste.

Default (fits one screen, at most ~40 lines): per archive its label (from the run), the
verdict, signature status with key id, commit and dirty flag, device and versions, the
command and the archive's SHA-256; the deciding tests side by side; one line on the
tests that do not decide; the seed pairs that matter. ``details=True`` (the CLI's
``--details``) appends everything else: every test, per-group tables, seed ranges,
coverage and scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specconform.report.context import RunFacts, relabel, run_facts, seed_lines
from specconform.report.mcnemar import mcnemar_sections
from specconform.report.model import (
    ArchiveView,
    check_cell,
    coverage_notes,
    detail_cell,
    detectable_tv_line,
    disjointness_statement,
    format_range,
    groups,
    load_views,
    ordered_test_names,
    role_of,
    scope_lines,
)
from specconform.report.numerics import NUMERICS_SECTION
from specconform.report.sequential import markdown_lines as sequential_markdown
from specconform.report.tree import TREE_TV_SECTION

VERIFY_NOTE = (
    "This report reads the archives without verifying them; check each with "
    "`specconform verify ARCHIVE --pubkey KEY` before relying on it."
)
VERIFIED_NOTE = (
    "Every archive was verified against the given public key (digests, "
    "signature, every test recomputed from raw data)."
)
NOT_DECIDING = ("secondary", "mechanism", "exploratory")
MAX_DECIDING_ROWS = 12  # more would push the default report past one screen


def markdown_report(
    archives: Sequence[Path], *, details: bool = False, pubkey: Path | None = None
) -> str:
    """Markdown for one or more archives, labelled from their runs.

    With `pubkey`, every archive is verified first (EvidenceError if one is invalid) and
    the report says "verified, key ..."; without it the report states it did not verify.
    """
    views = relabel(load_views(archives))
    return render_markdown(
        views, details=details, facts=run_facts(views, pubkey), verified=pubkey is not None
    )


def deciding_tests(views: Sequence[ArchiveView]) -> list[str]:
    """Tests that decide a verdict in some archive: the rows its verdict read (schema-2
    archives mark them ``deciding``, following the protocol's ``decision_roles``); in a
    schema-1 archive, rows whose role is not secondary, mechanism or exploratory."""

    def decides(view: ArchiveView, test: str) -> bool:
        row = view.row(test)
        if row is None:
            return False
        if any(r.deciding for r in view.evaluation.tests):  # schema 2
            return row.deciding
        return row.role not in NOT_DECIDING and row.passed is not None

    return [t for t in ordered_test_names(views) if any(decides(v, t) for v in views)]


def _deciding_rows(views: Sequence[ArchiveView], tests: list[str]) -> tuple[list[str], int]:
    """At most MAX_DECIDING_ROWS: failing ones first, then smallest p-values; the count
    of passing rows left out."""
    if len(tests) <= MAX_DECIDING_ROWS:
        return tests, 0

    def key(t: str):
        rows = [r for v in views if (r := v.row(t)) is not None]
        failed = any(r.passed is False for r in rows)
        p = min((r.pvalue for r in rows if r.pvalue is not None), default=1.0)
        return (not failed, p)

    shown = set(sorted(tests, key=key)[:MAX_DECIDING_ROWS])
    return [t for t in tests if t in shown], len(tests) - len(shown)


def _not_deciding_line(
    views: Sequence[ArchiveView], facts: Sequence[RunFacts], deciding: list[str]
) -> str:
    others = [t for t in ordered_test_names(views) if t not in deciding]
    if not others:
        return "Every test decides the verdict."
    failing = [
        f"{t} ({f.letter})"
        for t in others
        for v, f in zip(views, facts, strict=True)
        if (r := v.row(t)) is not None and r.passed is False
    ]
    roles = sorted({role_of(views, t) for t in others})
    state = f"failing: {', '.join(failing)}" if failing else "none fails"
    return (
        f"Not deciding: {len(others)} tests ({', '.join(roles)}); {state}. All rows: `--details`."
    )


def failed_cell(view: ArchiveView, limit: int = 3) -> str:
    """The failed deciding tests, at most `limit` named: a long list would not fit."""
    failed = view.evaluation.verdict.failed
    if not failed:
        unknown = view.evaluation.verdict.inconclusive  # schema 3: INCONCLUSIVE
        return f"none (no evidence: {', '.join(unknown[:limit])})" if unknown else "none"
    named = ", ".join(failed[:limit])
    return named if len(failed) <= limit else f"{named} and {len(failed) - limit} more"


def render_markdown(
    views: Sequence[ArchiveView],
    *,
    details: bool = False,
    facts: Sequence[RunFacts] | None = None,
    verified: bool = False,
) -> str:
    facts = list(facts) if facts is not None else run_facts(views)
    names = sorted({f.protocol for f in facts})
    cols = [f"{f.letter}: {f.label}" for f in facts]
    out = [f"## specconform evidence: {', '.join(names)}", ""]
    out += table(
        ["", *cols],
        [
            ["verdict", *[f"**{v.evaluation.verdict.verdict}**" for v in views]],
            ["failed", *[failed_cell(v) for v in views]],
            ["signature", *[f.signature for f in facts]],
            ["commit", *[f"`{f.commit}`" for f in facts]],
            ["device", *[f.device for f in facts]],
            ["command", *[f"`{f.command}`" for f in facts]],
            ["run id", *[f"`{v.run_id}`" for v in views]],
            ["SHA-256", *[f"`{v.sha256}`" for v in views]],
        ],
    )
    deciding = deciding_tests(views)
    shown, left_out = _deciding_rows(views, deciding)
    out += ["", "### Deciding tests", ""]
    if shown:
        out += table(
            ["test", "role", *[f.letter for f in facts]],
            [[t, role_of(views, t), *[check_cell(v.row(t)) for v in views]] for t in shown],
        )
        if left_out:
            out.append(f"\n{left_out} more deciding tests pass in every archive (`--details`).")
    else:
        out.append("No test decides a verdict.")
    out += ["", _not_deciding_line(views, facts, deciding)]
    out += mcnemar_sections(views, table)
    out += sequential_markdown(views, table)
    out += TREE_TV_SECTION.markdown_lines(views, table)
    out += NUMERICS_SECTION.markdown_lines(views, table)
    tv_line = detectable_tv_line(views, [f.letter for f in facts])
    if tv_line:
        out += ["", tv_line]
    seeds = seed_lines(views, facts)
    if seeds:
        out += ["", "Seeds: " + seeds[0], *[f"Seeds: {line}" for line in seeds[1:]]]
    if details:
        out += ["", *_details(views)]
    out += ["", VERIFIED_NOTE if verified else VERIFY_NOTE, ""]
    return "\n".join(out)


def _details(views: Sequence[ArchiveView]) -> list[str]:
    """The full tables (the former default report)."""
    out = ["## Details", "", "### Formal checks", ""]
    out += table(
        ["test", "role", *[_header(v) for v in views]],
        [
            [t, role_of(views, t), *[check_cell(v.row(t)) for v in views]]
            for t in ordered_test_names(views)
        ],
    )
    for group, tests in groups(views).items():
        out += ["", f"### Group `{group}`", ""]
        out += table(
            ["test", *[_header(v) for v in views]],
            [[t, *[detail_cell(v.row(t)) for v in views]] for t in tests],
        )
    out += ["", "### Seed ranges", ""]
    all_groups = sorted({g for v in views for g in v.seed_ranges})
    if all_groups:
        out += table(
            ["group", *[_header(v) for v in views]],
            [[g, *[format_range(v.seed_ranges.get(g)) for v in views]] for g in all_groups],
        )
        out.append("")
    out.append(disjointness_statement(views))
    out += ["", "### Coverage and scope", ""]
    out += [f"- {note}" for note in coverage_notes(views)] or ["- no test reports coverage"]
    for view in views:
        out += [f"- {view.label}: {line}" for line in scope_lines(view)]
    out += ["", "### Archives", ""]
    out += table(
        ["", "file", "SHA-256"], [[v.label, f"`{v.path.name}`", f"`{v.sha256}`"] for v in views]
    )
    return out


def _header(view: ArchiveView) -> str:
    return f"{view.label} `{view.run_id}`"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Markdown table lines; pipes and newlines inside cells are escaped."""
    lines = [
        "| " + " | ".join(_cell(h) for h in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
