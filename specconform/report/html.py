"""The HTML report: the PR summary, every test with failing ones first, and inline,
reproducible SVG plots grouped per test in a grid.

One self-contained page (no scripts, no external files, no render time): rendering the
same archives twice gives identical bytes. Needs the `plots` extra (matplotlib); without
it the command says so in one line (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from specconform.report.context import RunFacts, engine_line, relabel, run_facts, seed_lines
from specconform.report.markdown import VERIFIED_NOTE, VERIFY_NOTE, failed_cell
from specconform.report.model import (
    ArchiveView,
    check_cell,
    coverage_notes,
    detail_cell,
    disjointness_statement,
    format_range,
    ordered_test_names,
    role_of,
    scope_lines,
)
from specconform.report.sequential import html_lines as sequential_html
from specconform.report.tree import TREE_TV_SECTION
from specconform.util.extras import require

MAX_DETAIL_PLOTS = 48  # observed-vs-expected plots per report; more are listed, not drawn

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; max-width: 96em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f3f3f3; }
td.PASS { color: #1a7f37; } td.FAIL { color: #cf222e; font-weight: bold; }
tr.failing td:first-child { border-left: 4px solid #cf222e; }
code { font-size: 0.9em; overflow-wrap: anywhere; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(30em, 1fr));
        gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5em; }
.card.FAIL { border-color: #cf222e; border-width: 2px; }
.card pre { white-space: pre-wrap; font-size: 0.8em; margin: 0.3em 0; }
.card h3 { margin: 0.2em 0 0.4em; font-size: 1em; }
.card .plots { display: flex; flex-wrap: wrap; gap: 0.3em; }
.card figure { margin: 0; } .card svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; }
.side { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
"""


def html_report(
    archives: Sequence[Path], *, details: bool = True, pubkey: Path | None = None
) -> str:
    """A self-contained HTML page for one or more archives, labelled from their runs.

    The page always carries every test (`details` is accepted for symmetry with the
    Markdown report). With `pubkey`, every archive is verified first."""
    require("plots", "`specconform report --format html`")
    from specconform.report.model import load_views

    views = relabel(load_views(archives))
    return render_html(views, facts=run_facts(views, pubkey), verified=pubkey is not None)


def failing_first(views: Sequence[ArchiveView]) -> list[str]:
    """Every test: deciding ones that did not pass in some archive first, then other
    failing ones, then deciding ones, then the rest, each part in the archives' order."""
    names = ordered_test_names(views)

    def rank(test: str) -> int:
        rows = [r for v in views if (r := v.row(test)) is not None]
        if any(r.deciding and r.status not in ("PASS", "INFO") for r in rows):
            return 0
        if any(r.passed is False for r in rows):
            return 1
        return 2 if any(r.passed is not None for r in rows) else 3

    return sorted(names, key=rank)  # sorted is stable: order kept inside each part


def _is_failing(views: Sequence[ArchiveView], test: str) -> bool:
    return any((r := v.row(test)) is not None and r.passed is False for v in views)


def render_html(
    views: Sequence[ArchiveView], *, facts: Sequence[RunFacts] | None = None, verified: bool = False
) -> str:
    from specconform.report.plots import pvalue_plot

    facts = list(facts) if facts is not None else run_facts(views)
    names = ", ".join(sorted({f.protocol for f in facts}))
    tests = failing_first(views)
    cols = [f"{f.letter}: {f.label}" for f in facts]
    body = [f"<h1>specconform evidence: {escape(names)}</h1>"]
    body += _table(
        ["", *cols],
        [
            ["verdict", *[v.evaluation.verdict.verdict for v in views]],
            ["failed", *[failed_cell(v) for v in views]],
            ["signature", *[f.signature for f in facts]],
            ["commit", *[f.commit for f in facts]],
            ["engine", *[engine_line(v.run) for v in views]],
            ["device", *[f.device for f in facts]],
            ["command", *[f.command for f in facts]],
            ["run id", *[v.run_id for v in views]],
            ["SHA-256", *[v.sha256 for v in views]],
        ],
    )
    body += [
        f"<p>{_inline_code(line)}</p>" for line in (f"Seeds: {s}" for s in seed_lines(views, facts))
    ]
    from specconform.report.failing import failing_cards, failing_html

    body += failing_html(failing_cards(views, [f.label for f in facts]))
    body += ["<h2>Tests (failing first)</h2>", '<div class="side">']
    body += _table(
        ["test", "role", *cols],
        [[t, role_of(views, t), *[check_cell(v.row(t)) for v in views]] for t in tests],
        failing={t for t in tests if _is_failing(views, t)},
    )
    # Every test with a p-value, and every deciding rule that failed without one (drawn
    # at the clamp): a failing out_of_support row must not be missing from the chart.
    p_tests = [
        t
        for t in tests
        if any(
            (r := v.row(t)) is not None
            and (r.pvalue is not None or (r.deciding and r.status == "FAIL"))
            for v in views
        )
    ]
    if p_tests:
        body += [
            "<figure>",
            pvalue_plot(views, p_tests, labels=cols),
            "<figcaption>p-value of every test, per archive; failing deciding tests on top "
            "(a failed rule without p, e.g. out of support, at the clamp)."
            "</figcaption></figure>",
        ]
    body += ["</div>"]
    body += sequential_html(views, _table, escape)
    body += TREE_TV_SECTION.html_lines(views, _table, escape)
    body += _test_grid(views, facts, tests)
    body += _acceptance(views)
    body += ["<h2>Seed ranges</h2>"]
    all_groups = sorted({g for v in views for g in v.seed_ranges})
    if all_groups:
        body += _table(
            ["group", *cols],
            [[g, *[format_range(v.seed_ranges.get(g)) for v in views]] for g in all_groups],
        )
    body += [
        f"<p>{escape(disjointness_statement(views))}</p>",
        "<h2>Coverage and scope</h2>",
        "<ul>",
    ]
    notes = coverage_notes(views) or ["no test reports coverage"]
    notes += [f"{v.label}: {line}" for v in views for line in scope_lines(v)]
    body += [f"<li>{escape(note)}</li>" for note in notes] + ["</ul>"]
    body += [f"<p>{_inline_code(VERIFIED_NOTE if verified else VERIFY_NOTE)}</p>"]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>specconform evidence: {escape(names)}</title>\n<style>{_STYLE}</style>\n"
        "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def _test_grid(
    views: Sequence[ArchiveView], facts: Sequence[RunFacts], tests: Sequence[str]
) -> list[str]:
    """One card per test that has observed/expected counts: its statistic per archive and
    each archive's plot side by side; failing tests first, at most MAX_DETAIL_PLOTS."""
    from specconform.report.plots import has_observed_expected, observed_expected_plot

    cards, skipped, drawn = [], [], 0
    for test_index, test in enumerate(tests):
        rows = [
            (f, r)
            for v, f in zip(views, facts, strict=True)
            if (r := v.row(test)) is not None and has_observed_expected(r)
        ]
        if not rows:
            continue
        if drawn + len(rows) > MAX_DETAIL_PLOTS:
            skipped.append(test)
            continue
        status = "FAIL" if _is_failing(views, test) else "PASS"
        figures = []
        for fact, row in rows:
            svg = observed_expected_plot(row, plot_id=f"oe-{test_index}-{fact.letter}")
            if svg is not None:
                drawn += 1
                figures.append(
                    f"<figure>{svg}<figcaption>{escape(fact.letter)}: "
                    f"{escape(detail_cell(row))}</figcaption></figure>"
                )
        cards.append(
            f'<div class="card {status}"><h3>{escape(test)} '
            f"<small>({escape(role_of(views, test))}, {status})</small></h3>"
            f'<div class="plots">{"".join(figures)}</div></div>'
        )
    if not cards:
        return []
    out = ["<h2>Observed vs expected, per test</h2>", '<div class="grid">', *cards, "</div>"]
    if skipped:
        out.append(
            f"<p>Not drawn (limit {MAX_DETAIL_PLOTS} plots): {escape(', '.join(skipped))}</p>"
        )
    return out


def _acceptance(views: Sequence[ArchiveView]) -> list[str]:
    from specconform.report.plots import acceptance_plot

    svg = acceptance_plot(views)
    return [] if svg is None else ["<h2>Acceptance ratios</h2>", "<figure>", svg, "</figure>"]


def _inline_code(text: str) -> str:
    """Escape, then turn Markdown `code` spans into <code> (no literal backticks)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], failing: set[str] | None = None
) -> list[str]:
    lines = ["<table>", "<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = []
        for cell in row:
            text = str(cell)
            status = next((s for s in ("PASS", "FAIL") if text.endswith(s)), "")
            css = f' class="{status}"' if status else ""
            cells.append(f"<td{css}>{escape(text)}</td>")
        tr = '<tr class="failing">' if failing and str(row[0]) in failing else "<tr>"
        lines.append(tr + "".join(cells) + "</tr>")
    return lines + ["</table>"]
