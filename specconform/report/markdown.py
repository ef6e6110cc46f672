"""The pull-request report in Markdown: archives side by side, ready to paste.

Sections: a header table (run, verdict, signature), formal checks (one row per test, one
column per archive: p-value and PASS/FAIL), per-group tables, seed ranges with an
explicit disjointness statement, coverage and scope notes, and each archive's SHA-256.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specconform.report.model import (
    ArchiveView,
    check_cell,
    coverage_notes,
    detail_cell,
    disjointness_statement,
    format_range,
    groups,
    load_views,
    ordered_test_names,
    role_of,
    scope_lines,
)

VERIFY_NOTE = ("This report reads the archives without verifying them; check each with "
               "`specconform verify ARCHIVE --pubkey KEY` before relying on it.")


def markdown_report(archives: Sequence[Path]) -> str:
    """Markdown for one or more archives (the first is the primary run)."""
    return render_markdown(load_views(archives))


def render_markdown(views: Sequence[ArchiveView]) -> str:
    names = sorted({str(v.run.get("protocol_name", "?")) for v in views})
    out = [f"## specconform evidence: {', '.join(names)}", ""]
    out += table(["", *[_header(v) for v in views]], [
        ["verdict", *[f"**{v.evaluation.verdict.verdict}**" for v in views]],
        ["failed", *[", ".join(v.evaluation.verdict.failed) or "none" for v in views]],
        ["signature", *["signed (Ed25519)" if v.signed else "UNSIGNED" for v in views]],
    ])
    out += ["", "### Formal checks", ""]
    out += table(["test", "role", *[_header(v) for v in views]],
                 [[t, role_of(views, t), *[check_cell(v.row(t)) for v in views]]
                  for t in ordered_test_names(views)])
    for group, tests in groups(views).items():
        out += ["", f"### Group `{group}`", ""]
        out += table(["test", *[_header(v) for v in views]],
                     [[t, *[detail_cell(v.row(t)) for v in views]] for t in tests])
    out += ["", "### Seed ranges", ""]
    all_groups = sorted({g for v in views for g in v.seed_ranges})
    if all_groups:
        out += table(["group", *[_header(v) for v in views]],
                     [[g, *[format_range(v.seed_ranges.get(g)) for v in views]]
                      for g in all_groups])
        out.append("")
    out.append(disjointness_statement(views))
    out += ["", "### Coverage and scope", ""]
    out += [f"- {note}" for note in coverage_notes(views)] or ["- no test reports coverage"]
    for view in views:
        out += [f"- {view.label}: {line}" for line in scope_lines(view)]
    out += ["", "### Archives", ""]
    out += table(["", "file", "SHA-256"],
                 [[v.label, f"`{v.path.name}`", f"`{v.sha256}`"] for v in views])
    out += ["", VERIFY_NOTE, ""]
    return "\n".join(out)


def _header(view: ArchiveView) -> str:
    return f"{view.label} `{view.run_id}`"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Markdown table lines; pipes and newlines inside cells are escaped."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
