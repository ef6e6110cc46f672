"""`specconform report --pr --format html`: the pull-request page as one HTML file.

The page is the Markdown PR page (:mod:`specconform.report.pr`: failing archives first,
functional checks, distribution side by side, quality, performance, evidence) rendered
to HTML, opened by the failing-test cards with their diagnoses and residual plots
(:mod:`specconform.report.failing`). Self-contained, no scripts; the same archives give
the same bytes. Needs the `plots` extra, like every HTML report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from specconform.util.extras import require

_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def pr_html(archives: Sequence[Path], *, pubkey: Path | None = None) -> str:
    require("plots", "`specconform report --pr --format html`")
    from specconform.report.context import run_facts
    from specconform.report.failing import failing_cards, failing_html
    from specconform.report.html import _STYLE
    from specconform.report.model import load_views
    from specconform.report.pr import collect_items, failing_items_first, render_pr

    views = load_views(archives)
    facts = run_facts(views, pubkey)
    items = failing_items_first(collect_items(views, facts))
    cards = failing_cards([i.view for i in items], [i.name for i in items])
    markdown = render_pr(views, facts, verified=pubkey is not None, cards=False)
    lines = markdown.splitlines()
    title = "specconform: pull-request evidence"
    body = [*markdown_html(lines[:4]), *failing_html(cards), *markdown_html(lines[4:])]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def markdown_html(lines: Sequence[str]) -> list[str]:
    """The subset of Markdown the report pages write: #-headings, pipe tables (header,
    separator, rows), fenced code, paragraphs with `code` and **bold**."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("```"):
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines)
            )
            out.append("<pre>" + escape("\n".join(lines[i + 1 : end])) + "</pre>")
            i = end
        elif line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            out += _table(lines[i:end])
            i = end - 1
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    return out


def _table(rows: Sequence[str]) -> list[str]:
    cells = [_split(r) for r in rows if not re.fullmatch(r"\|(\s*-+\s*\|)+", r.replace(" ", ""))]
    head, *body = cells
    out = ["<table>", "<tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    for row in body:
        tds = []
        for c in row:
            status = next((s for s in ("PASS", "FAIL") if s in c), "")
            css = f' class="{status}"' if status else ""
            tds.append(f"<td{css}>{_inline(c)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    return out + ["</table>"]


def _split(row: str) -> list[str]:
    """A pipe-table row's cells (``\\|`` is a literal pipe inside a cell)."""
    parts = re.split(r"(?<!\\)\|", row.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def _inline(text: str) -> str:
    return _BOLD.sub(r"<b>\1</b>", _CODE.sub(r"<code>\1</code>", escape(text)))
