"""Failing tests first: a card per failing or inconclusive test, with its diagnosis.

Both report pages open with these cards (issue 36): the Markdown pull-request page (a
"Failing tests" section) and the HTML pages (a card per test and archive, with the
diagnosis as text and, for a χ² test, its worst stratum's standardized residuals per cell,
where a difference shows however small the expected counts). Which rows need a card and
what it says is :mod:`specconform.diagnosis`'s, computed from each archive alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from html import escape
from pathlib import Path

from specconform.diagnosis import Diagnosis, diagnose_archive
from specconform.evidence.reader import read_archive
from specconform.report.model import ArchiveView
from specconform.results import TestRow
from specconform.util.errors import SpecconformError


@dataclass(frozen=True)
class FailingCard:
    """One failing test of one archive: the archive's label, the row's role and why."""

    label: str  # the run's label (context.run_labels): "primary", "mutant bonus_params", ...
    archive: Path
    row: TestRow
    diagnosis: Diagnosis


def failing_cards(views: Sequence[ArchiveView], labels: Sequence[str]) -> list[FailingCard]:
    """The cards of every archive, deciding rows first, archives in the order given."""
    cards = []
    for view, label in zip(views, labels, strict=True):
        rows = {r.test: r for r in view.evaluation.tests}
        try:
            diagnoses = diagnose_archive(read_archive(view.path))
        except (KeyError, ValueError, SpecconformError):  # raw files kept outside the archive
            continue
        for d in diagnoses:
            named = replace(d, archive=view.path.name)
            cards.append(FailingCard(label, view.path, rows[d.test], named))
    cards.sort(key=lambda c: not c.row.deciding)  # stable: archive order kept inside
    return cards


def failing_markdown(cards: Sequence[FailingCard]) -> list[str]:
    """A "Failing tests" section: per card a heading and its diagnosis as a code block."""
    if not cards:
        return []
    out = ["", "### Failing tests", ""]
    for card in cards:
        decides = "deciding" if card.row.deciding else "does not decide"
        out += [
            f"**{card.diagnosis.test}** ({card.row.role}, {decides}) in `{card.label}`: "
            f"{card.diagnosis.status}"
            + (f" ({card.diagnosis.reason})" if card.diagnosis.reason else ""),
            "",
            "```",
            *card.diagnosis.lines()[1:],
            "```",
            "",
        ]
    return out[:-1]


def failing_html(cards: Sequence[FailingCard]) -> list[str]:
    """A card per failing test (id ``failing-<n>``), before anything else on the page."""
    from specconform.report.plots import residual_plot

    if not cards:
        return []
    out = ["<h2>Failing tests</h2>", '<div class="grid">']
    for index, card in enumerate(cards):
        d = card.diagnosis
        decides = "deciding" if card.row.deciding else "does not decide"
        why = f" ({d.reason})" if d.reason else ""
        plot = ""
        if d.stratum is not None:
            svg = residual_plot(card.row, plot_id=f"resid-{index}")
            if svg is not None:
                plot = (
                    f"<figure>{svg}<figcaption>standardized residual (O - E) / sqrt(E) per "
                    f"cell of stratum {escape(d.stratum.where)}; dashed: +-2.58 (two-sided "
                    "1%)</figcaption></figure>"
                )
        out.append(
            f'<div class="card FAIL diagnosis" id="failing-{index}">'
            f"<h3>{escape(d.test)} <small>({escape(card.row.role)}, {decides}; "
            f"{escape(card.label)})</small></h3>"
            f"<p><b>{escape(d.status)}</b>{escape(why)}</p>"
            f"<pre>{escape(chr(10).join(d.lines()[1:]))}</pre>{plot}</div>"
        )
    return out + ["</div>"]
