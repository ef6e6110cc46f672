"""The short Markdown a CI job appends to $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specconform.evidence.reader import read_archive
from specconform.report.markdown import table
from specconform.report.model import format_number, outcome, pvalue_text, verdict_statement
from specconform.results import Evaluation

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def step_summary_markdown(archive: Path) -> str:
    """Verdict headline, one row per test, and the archive's name and SHA-256."""
    contents = read_archive(Path(archive))
    run = contents.json_object("run.json")
    title = f"{run.get('protocol_name', '?')} ({contents.top})"
    text = evaluation_summary_markdown(
        contents.evaluation(),
        title=title,
        archive_name=Path(archive).name,
        archive_sha256=contents.sha256,
    )
    return text + _where(archive)


def _where(archive: Path) -> str:
    """The failing tests' diagnoses (report.failing), as the PR page shows them."""
    from specconform.report.context import run_labels
    from specconform.report.failing import failing_cards, failing_markdown
    from specconform.report.model import load_views

    views = load_views([Path(archive)])
    lines = failing_markdown(failing_cards(views, run_labels(views)))
    return "\n".join(lines) + "\n" if lines else ""


def evaluation_summary_markdown(
    evaluation: Evaluation,
    *,
    title: str,
    archive_name: str | None = None,
    archive_sha256: str | None = None,
) -> str:
    """The step summary for an evaluation in memory (no archive needed)."""
    verdict = evaluation.verdict
    lines = [f"### specconform: {title}: **{verdict.verdict}**", ""]
    if verdict.failed:
        lines += (
            [f"Failed: {', '.join(verdict.failed)}", ""]
            if not verdict.reasons
            else ["Failed: " + ", ".join(f"{t} ({why})" for t, why in verdict.reasons), ""]
        )
    lines += table(
        ["test", "role", "statistic", "df", "p-values", "n", "result"],
        [
            [
                r.test,
                r.role,
                format_number(r.statistic),
                format_number(r.df),
                pvalue_text(r),
                str(r.n),
                outcome(r) + ("" if r.deciding or r.status == "INFO" else " (not deciding)"),
            ]
            for r in evaluation.tests
        ],
    )
    lines += [
        "",
        f"Verdict: {verdict_statement(verdict)}",
        f"Decision rule (alpha {format_number(verdict.alpha)}): {verdict.rule or 'not stated'}",
    ]
    if archive_name is not None:
        lines += ["", f"Archive `{archive_name}`, SHA-256 `{archive_sha256}`"]
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append `markdown` to the file named by $GITHUB_STEP_SUMMARY; None when unset."""
    env = os.environ if env is None else env
    target = env.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    path = Path(target)
    with open(path, "a", encoding="utf-8") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path
