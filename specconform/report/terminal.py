"""The run's table on a terminal: what `specconform run` and `gate` print after a run.

The runner returns typed results (`runner.execute.RunOutcome`); printing them is this
layer's job.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specconform.results import Evaluation


def print_table(evaluation: Evaluation, file=None, archive: Path | None = None) -> None:
    """The table reviewers know: a row per check with its p-values named by what they are
    (p, p_Bonf over seed-sharing groups, p_Holm after the family-wise adjustment) and
    its status (PASS, FAIL, "no evidence", or "info" for rows that never decide), then
    the verdict's stated false-fail rate."""
    from rich.console import Console
    from rich.table import Table

    from specconform.report.model import outcome, pvalue_text, verdict_statement

    console = Console(file=file or sys.stdout, highlight=False, width=140)
    table = Table(show_lines=False)
    for col in ("check", "role", "statistic", "df", "p-values", "n", "result"):
        table.add_column(col, justify="left" if col in ("check", "role", "p-values") else "right")
    for t in evaluation.tests:
        pvalues = "—" if t.pvalue is None and t.adjusted_pvalue is None else pvalue_text(t)
        text = outcome(t)
        result = text + (
            f" ({t.reason})" if t.passed is False and t.reason and t.reason != text else ""
        )
        table.add_row(
            t.test,
            t.role + (" *" if t.deciding else ""),
            _fmt(t.statistic),
            _fmt(t.df),
            pvalues,
            str(t.n),
            result,
        )
    console.print(table)
    console.print(f"* deciding; {verdict_statement(evaluation.verdict)}")
    from specconform.report.markdown import table as markdown_table
    from specconform.report.mcnemar import mcnemar_markdown

    for line in mcnemar_markdown(evaluation, markdown_table):  # GSM8K runs: the pairs
        console.print(line, markup=False, soft_wrap=True)
    from specconform.report.sequential import terminal_lines

    for line in terminal_lines(evaluation):  # sequential runs: E, seeds used, why info
        console.print(line, markup=False)
    from specconform.report.tree import TREE_TV_SECTION

    for line in TREE_TV_SECTION.terminal_lines(evaluation):  # lossy tree runs: TV, interval
        console.print(line, markup=False)
    from specconform.report.numerics import NUMERICS_SECTION

    # checks held to a numerics model: near-ties
    for line in NUMERICS_SECTION.terminal_lines(evaluation):
        console.print(line, markup=False, soft_wrap=True)
    if archive is not None:
        print_diagnoses(archive, console)


def print_diagnoses(archive: Path, console) -> None:
    """Where each failing or inconclusive row differs (specconform.diagnosis), read back
    from the sealed archive, so the terminal shows what `report` and JUnit show."""
    lines = diagnosis_lines(archive)
    if lines:
        console.print("where it differs:", style="bold")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def diagnosis_lines(archive: Path) -> list[str]:
    """Every diagnosis's lines, or one line saying why none could be computed (raw files
    kept outside the archive, an unreadable member)."""
    from dataclasses import replace

    from specconform.diagnosis import diagnose_archive
    from specconform.evidence.reader import read_archive
    from specconform.util.errors import SpecconformError

    try:
        diagnoses = diagnose_archive(read_archive(Path(archive)))
    except (SpecconformError, KeyError, ValueError) as exc:
        return [f"(no diagnosis: {exc})"]
    return [line for d in diagnoses for line in replace(d, archive=str(archive)).lines()]


def _fmt(x) -> str:
    if x is None:
        return "—"
    return f"{x:.4g}"
