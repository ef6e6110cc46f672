"""Reproducible SVG plots for the HTML report (matplotlib, no pyplot global state).

Reproducible bytes: `svg.hashsalt` is fixed (per plot, so the ids of several inline
SVGs in one page never collide), the Date metadata is dropped, text stays text
(`svg.fonttype` none: no glyph definitions with shared ids), and each plot is drawn on a
fresh `Figure`. The same inputs and matplotlib version give the same SVG.

Plot inputs come from test rows' typed `detail` records, read by shape
(specconform/report/readings.py; all optional):
- `observed`, `expected`: equal-length counts per cell (`labels` optional);
- `strata` whose records have `observed`, `expected`: observed vs expected per cell of
  every stratum, as one scatter with the y = x line;
- `acceptance_ratio` (with optional `expected_acceptance_ratio`): one point per test.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specconform.report.model import ArchiveView
from specconform.report.readings import acceptance_ratio, count_pairs, labels_of, strata_of
from specconform.results import TestRow

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn, not with the package
    from matplotlib.figure import Figure

MAX_BAR_CELLS = 60  # beyond this a bar per cell is unreadable: draw a scatter instead
P_FLOOR = 1e-300  # -log10(0) is infinite; p-values below this are drawn at 300


def render_svg(
    draw: Callable[[Figure], None], *, plot_id: str, size: tuple[float, float] = (7.0, 3.2)
) -> str:
    """Draw on a fresh Figure and return its reproducible inline SVG (no XML prolog)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(
        {
            "svg.hashsalt": f"specconform-{plot_id}",
            "svg.id": plot_id,
            "svg.fonttype": "none",
            "font.size": 8,
        }
    ):
        figure = Figure(figsize=size, dpi=72)
        draw(figure)
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


P_CLAMP = 10.0  # -log10(p) axis ends here: larger values are drawn at the edge, marked


def pvalue_plot(
    views: Sequence[ArchiveView], tests: Sequence[str], *, labels: Sequence[str] | None = None
) -> str:
    """-log10(p) per test, one bar per archive, the alpha line of every archive dashed.

    The axis stops at P_CLAMP (p = 1e-10): a failing run's p = 1e-300 would otherwise
    squeeze a passing run's bars (p ~ 0.5, -log10 = 0.3) to nothing. Clamped bars end in
    a ">" marker and carry their value as text, so nothing is hidden."""
    labels = list(labels) if labels is not None else [v.label for v in views]
    alphas = sorted(
        {
            float(r.alpha)
            for v in views
            for t in tests
            if (r := v.row(t)) is not None and 0 < r.alpha < 1
        }
    )

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        width = 0.8 / len(views)
        for index, view in enumerate(views):
            ys = [i + index * width for i in range(len(tests))]
            heights = [_neg_log10(_pvalue(view.row(t))) for t in tests]
            rules = [(r := view.row(t)) is not None and r.pvalue is None for t in tests]
            shown = [min(h, P_CLAMP) for h in heights]
            axes.barh(ys, shown, height=width, label=labels[index])
            for y, h, rule in zip(ys, heights, rules, strict=True):
                if h > P_CLAMP:
                    axes.plot([P_CLAMP], [y], ">", color="black", markersize=4)
                    axes.text(
                        P_CLAMP * 0.98,
                        y,
                        "rule " if rule else f"{h:.0f} ",
                        ha="right",
                        va="center",
                        fontsize=6,
                        color="white",
                    )
        for alpha in alphas:
            axes.axvline(
                -math.log10(alpha),
                color="black",
                linestyle="--",
                linewidth=1,
                label=f"alpha = {alpha:.3g}",
            )
        axes.set_xlim(0, P_CLAMP * 1.03)
        axes.set_yticks([i + 0.4 - width / 2 for i in range(len(tests))], labels=list(tests))
        axes.invert_yaxis()
        axes.set_xlabel(f"-log10(p); right of dashed alpha = rejected\n> = clamped at {P_CLAMP:g}")
        axes.legend(loc="lower right", fontsize=7)

    return render_svg(draw, plot_id="pvalues", size=(5.2, 1.0 + 0.14 * len(tests) * len(views)))


def observed_expected_plot(row: TestRow, plot_id: str) -> str | None:
    """Observed vs expected counts for one test row, or None if its detail has none."""
    strata = strata_of(row.detail)
    if strata:
        cells = [pair for s in strata for pair in count_pairs(s)]
        return _scatter(cells, f"{row.test}: {len(strata)} strata", plot_id) if cells else None
    pairs = count_pairs(row.detail)
    if not pairs:
        return None
    if len(pairs) > MAX_BAR_CELLS:
        return _scatter(pairs, row.test, plot_id)
    labels = labels_of(row.detail)
    if labels is None or len(labels) != len(pairs):
        labels = [str(i) for i in range(len(pairs))]

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        xs = range(len(pairs))
        axes.bar(xs, [o for o, _ in pairs], color="#9ecae1", label="observed")
        axes.plot(xs, [e for _, e in pairs], "o", color="#d62728", markersize=4, label="expected")
        axes.set_xticks(list(xs), labels=[str(label) for label in labels], rotation=90)
        axes.set_title(row.test)
        axes.set_ylabel("count")
        axes.legend()

    return render_svg(draw, plot_id=plot_id, size=(4.2, 2.8))


MAX_RESIDUAL_CELLS = 40  # the cells with the largest contributions; the rest are near 0
RESIDUAL_CLIP = 10.0  # an infinite residual (a count where E = 0) is drawn here, marked
RESIDUAL_BAND = 2.58  # |z| above this: outside the two-sided 1% band of one cell


def residual_plot(row: TestRow, plot_id: str) -> str | None:
    """Standardized residuals (O - E) / sqrt(E) per cell of the row's worst stratum
    (specconform.diagnosis.cells), largest contributions first: a χ² failure shows as
    bars beyond the dashed +-2.58 lines, tail cells included (a linear observed-vs-expected
    scatter hides them near the origin). None for a row without strata."""
    from specconform.diagnosis.cells import cells_of, worst_record

    detail = row.detail
    strata = strata_of(detail) or getattr(detail, "per_group", None) or ()
    record = worst_record(strata)
    if record is None or not (hasattr(record, "tokens") or hasattr(record, "rejected")):
        return None
    cells = cells_of(record, limit=MAX_RESIDUAL_CELLS)
    if not cells:
        return None

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        xs = range(len(cells))
        values = [max(-RESIDUAL_CLIP, min(RESIDUAL_CLIP, c.residual)) for c in cells]
        colors = ["#cf222e" if abs(v) > RESIDUAL_BAND else "#9ecae1" for v in values]
        axes.bar(xs, values, color=colors)
        for x, c in zip(xs, cells, strict=True):
            if abs(c.residual) > RESIDUAL_CLIP:
                axes.text(
                    x, math.copysign(RESIDUAL_CLIP, c.residual), "inf", ha="center", fontsize=6
                )
        for y in (RESIDUAL_BAND, -RESIDUAL_BAND):
            axes.axhline(y, color="black", linestyle="--", linewidth=1)
        axes.axhline(0, color="black", linewidth=0.5)
        axes.set_xticks(list(xs), labels=[c.label for c in cells], rotation=90)
        axes.set_ylabel("(O - E) / sqrt(E)")
        axes.set_title(f"{row.test}: cells by contribution")

    return render_svg(draw, plot_id=plot_id, size=(4.6, 2.9))


def has_observed_expected(row: TestRow) -> bool:
    """Whether `observed_expected_plot` would draw something for this row."""
    strata = strata_of(row.detail)
    if strata:
        return any(count_pairs(s) for s in strata)
    return bool(count_pairs(row.detail))


def acceptance_plot(views: Sequence[ArchiveView]) -> str | None:
    """Observed (and expected) acceptance ratios of every row that reports one."""
    points = [
        (view.label, row, ratio)
        for view in views
        for row in view.evaluation.tests
        if (ratio := acceptance_ratio(row.detail)) is not None
    ]
    if not points:
        return None

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        ys = range(len(points))
        axes.plot([ratio[0] for _, _, ratio in points], ys, "o", label="observed")
        expected: list[tuple[float, int]] = []
        for (_, _, ratio), y in zip(points, ys, strict=True):
            if ratio[1] is not None:
                expected.append((ratio[1], y))
        if expected:
            axes.plot(
                [x for x, _ in expected],
                [y for _, y in expected],
                "x",
                color="black",
                label="expected",
            )
        axes.set_yticks(list(ys), labels=[f"{label}: {r.test}" for label, r, _ in points])
        axes.invert_yaxis()
        axes.set_xlabel("acceptance ratio")
        axes.margins(y=0.3)
        axes.legend()

    return render_svg(draw, plot_id="acceptance", size=(7.0, 1.2 + 0.3 * len(points)))


def _scatter(pairs: list[tuple[float, float]], title: str, plot_id: str) -> str:
    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        axes.plot([e for _, e in pairs], [o for o, _ in pairs], ".", markersize=3)
        top = max(max(o for o, _ in pairs), max(e for _, e in pairs), 1.0)
        axes.plot([0, top], [0, top], color="black", linewidth=1, label="observed = expected")
        # Log scale (linear below 1, where zero counts sit): the tail cells, where a
        # truncation or temperature bug shows, are not squeezed into the origin.
        axes.set_xscale("symlog", linthresh=1.0)
        axes.set_yscale("symlog", linthresh=1.0)
        axes.set_xlabel("expected count (log)")
        axes.set_ylabel("observed count (log)")
        axes.set_title(title)
        axes.legend()

    return render_svg(draw, plot_id=plot_id, size=(4.2, 3.4))


def _pvalue(row: TestRow | None) -> float | None:
    """The row's p; a deciding rule without p that failed (out of support, engine errors)
    is drawn as p = 0, at the clamp: it rejected with certainty."""
    if row is None:
        return None
    if row.pvalue is None and row.deciding and row.status == "FAIL":
        return 0.0
    return row.pvalue


def _neg_log10(p: float | None) -> float:
    if p is None or not math.isfinite(p):
        return 0.0
    return -math.log10(max(p, P_FLOOR))
