"""A report section of one detail type: the rows of an evaluation that carry it, shown
as lines under `run`'s table and, per archive that has such rows, as a Markdown (or
HTML) table headed with the archive's label, with notes below. An archive without such
rows contributes nothing. Subclasses say which rows, their cells and their notes; the
layout is written here once (report/numerics.py, report/tree.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from specconform.report.model import ArchiveView
from specconform.results import Evaluation, TestRow

D = TypeVar("D")


class DetailSection(ABC, Generic[D]):
    title: str  # the Markdown/HTML heading, before "(<archive label>)"
    header: Sequence[str]  # the table's columns
    intro: str  # the terminal's first line

    @abstractmethod
    def rows(self, evaluation: Evaluation) -> list[tuple[TestRow, D]]:
        """The evaluation's rows that carry this section's detail, with it."""

    @abstractmethod
    def cells(self, row: TestRow, detail: D) -> list[str]:
        """One row of the Markdown/HTML table."""

    @abstractmethod
    def line(self, row: TestRow, detail: D) -> str:
        """One row in the terminal."""

    @abstractmethod
    def notes(self, rows: list[tuple[TestRow, D]]) -> list[str]:
        """Below the table (Markdown/HTML: paragraphs)."""

    def terminal_notes(self, rows: list[tuple[TestRow, D]]) -> list[str]:
        """Below the terminal lines; by default the table's notes."""
        return self.notes(rows)

    def terminal_lines(self, evaluation: Evaluation) -> list[str]:
        rows = self.rows(evaluation)
        if not rows:
            return []
        return [self.intro, *(self.line(r, d) for r, d in rows), *self.terminal_notes(rows)]

    def markdown_lines(self, views: Sequence[ArchiveView], table: Callable) -> list[str]:
        out: list[str] = []
        for view, rows in self._per_archive(views):
            out += ["", f"### {self.title} ({view.label})", ""]
            out += table(self.header, [self.cells(r, d) for r, d in rows])
            out += ["", *self.notes(rows)]
        return out

    def html_lines(
        self, views: Sequence[ArchiveView], html_table: Callable, escape: Callable
    ) -> list[str]:
        out: list[str] = []
        for view, rows in self._per_archive(views):
            out += [f"<h2>{self.title} ({escape(view.label)})</h2>"]
            out += html_table(self.header, [self.cells(r, d) for r, d in rows])
            out += [f"<p>{escape(note)}</p>" for note in self.notes(rows)]
            out += self.figure(view, rows)
        return out

    def figure(self, view: ArchiveView, rows: list[tuple[TestRow, D]]) -> list[str]:
        """HTML lines of a plot after the notes (none by default)."""
        return []

    def _per_archive(self, views: Sequence[ArchiveView]):
        for view in views:
            rows = self.rows(view.evaluation)
            if rows:
                yield view, rows
