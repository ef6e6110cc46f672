"""The HTML report: the Markdown report's tables plus inline, reproducible SVG plots.

One self-contained page (no scripts, no external files, no render time): rendering the
same archives twice gives identical bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from specconform.report.markdown import VERIFY_NOTE
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
from specconform.report.plots import (
    acceptance_plot,
    has_observed_expected,
    observed_expected_plot,
    pvalue_plot,
)

MAX_DETAIL_PLOTS = 48  # observed-vs-expected plots per report; more are listed, not drawn

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.PASS { color: #1a7f37; } td.FAIL { color: #cf222e; font-weight: bold; }
code { font-size: 0.9em; }
figure { margin: 0.5em 0 1.5em; }
"""


def html_report(archives: Sequence[Path]) -> str:
    """A self-contained HTML page for one or more archives (the first is the primary)."""
    return render_html(load_views(archives))


def render_html(views: Sequence[ArchiveView]) -> str:
    names = ", ".join(sorted({str(v.run.get("protocol_name", "?")) for v in views}))
    tests = ordered_test_names(views)
    body = [f"<h1>specconform evidence: {escape(names)}</h1>"]
    body += _table(["", *[_header(v) for v in views]], [
        ["verdict", *[v.evaluation.verdict.verdict for v in views]],
        ["failed", *[", ".join(v.evaluation.verdict.failed) or "none" for v in views]],
        ["signature", *["signed (Ed25519)" if v.signed else "UNSIGNED" for v in views]],
    ])
    body += ["<h2>Formal checks</h2>"]
    body += _table(["test", "role", *[_header(v) for v in views]],
                   [[t, role_of(views, t), *[check_cell(v.row(t)) for v in views]]
                    for t in tests])
    if tests:
        body += ["<figure>", pvalue_plot(views, tests),
                 "<figcaption>p-value of every test, per archive.</figcaption></figure>"]
    for group, group_tests in groups(views).items():
        body += [f"<h2>Group <code>{escape(group)}</code></h2>"]
        body += _table(["test", *[_header(v) for v in views]],
                       [[t, *[detail_cell(v.row(t)) for v in views]] for t in group_tests])
    body += _detail_plots(views)
    acceptance = acceptance_plot(views)
    if acceptance is not None:
        body += ["<h2>Acceptance ratios</h2>", "<figure>", acceptance, "</figure>"]
    body += ["<h2>Seed ranges</h2>"]
    all_groups = sorted({g for v in views for g in v.seed_ranges})
    if all_groups:
        body += _table(["group", *[_header(v) for v in views]],
                       [[g, *[format_range(v.seed_ranges.get(g)) for v in views]]
                        for g in all_groups])
    body += [f"<p>{escape(disjointness_statement(views))}</p>", "<h2>Coverage and scope</h2>",
             "<ul>"]
    notes = coverage_notes(views) or ["no test reports coverage"]
    notes += [f"{v.label}: {line}" for v in views for line in scope_lines(v)]
    body += [f"<li>{escape(note)}</li>" for note in notes] + ["</ul>", "<h2>Archives</h2>"]
    body += _table(["", "file", "SHA-256"], [[v.label, v.path.name, v.sha256] for v in views])
    body += [f"<p>{escape(VERIFY_NOTE)}</p>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>specconform evidence: {escape(names)}</title>\n<style>{_STYLE}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def _detail_plots(views: Sequence[ArchiveView]) -> list[str]:
    """Observed-vs-expected plots of every row whose detail carries counts."""
    figures, skipped = [], []
    for view_index, view in enumerate(views):
        for row_index, row in enumerate(view.evaluation.tests):
            if not has_observed_expected(row):
                continue
            if len(figures) >= MAX_DETAIL_PLOTS:
                skipped.append(f"{view.label}: {row.test}")
                continue
            svg = observed_expected_plot(row, plot_id=f"oe-{view_index}-{row_index}")
            if svg is not None:
                figures.append(
                    "<figure>" + svg + f"<figcaption>{escape(view.label)}: {escape(row.test)}, "
                    "observed vs expected</figcaption></figure>")
    if not figures:
        return []
    out = ["<h2>Observed vs expected</h2>", *figures]
    if skipped:
        out.append(f"<p>Not drawn (limit {MAX_DETAIL_PLOTS}): {escape(', '.join(skipped))}</p>")
    return out


def _header(view: ArchiveView) -> str:
    return f"{view.label} {view.run_id}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["<table>", "<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = []
        for cell in row:
            text = str(cell)
            status = next((s for s in ("PASS", "FAIL") if text.endswith(s)), "")
            css = f' class="{status}"' if status else ""
            cells.append(f"<td{css}>{escape(text)}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return lines + ["</table>"]
