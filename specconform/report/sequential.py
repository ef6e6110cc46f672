"""The sequential (anytime-valid) verdict in reports: E at the stop against 1/alpha, the
seeds used against the budget, and the e-process after each batch.

Reads the deciding ``sequential_eprocess`` row of a sequential run
(:mod:`specconform.kinds.distribution.sequential`); archives without one contribute
nothing. One set of lines for the terminal table (`run`), Markdown and HTML (with an SVG
of log E against seeds when the plots extra is installed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from specconform.details.distribution import SequentialDetail, TrajectoryPoint
from specconform.evidence.results_io import SEQUENTIAL_TEST
from specconform.report.model import ArchiveView
from specconform.results import Evaluation, TestRow

MAX_TRAJECTORY_ROWS = 12  # more batches: the first, the last and evenly spaced ones
WHY_INFO = (
    "A sequential run stops when the e-process decides; under that optional stopping the "
    "fixed-N tests' alpha does not hold, so their rows are informational (never deciding) "
    "and only the e-process, valid at any stopping time by Ville's inequality, decides."
)


def eprocess_row(evaluation: Evaluation) -> TestRow | None:
    return next((t for t in evaluation.tests if t.test == SEQUENTIAL_TEST), None)


def e_text(log_e: float | None) -> str:
    """E from log E (None: infinite, an observation of reference probability 0)."""
    if log_e is None or log_e == math.inf:
        return "inf"
    return f"{math.exp(log_e):.3g}" if log_e < 700 else f"e^{log_e:.0f}"


def summary_line(row: TestRow) -> str:
    d = row.detail
    if not isinstance(d, SequentialDetail):
        return f"sequential: {row.test} carries no e-process trajectory"
    last = d.trajectory[-1] if d.trajectory else None
    stop = "reached 1/alpha: FAIL" if row.status == "FAIL" else "never reached 1/alpha: PASS"
    return (
        f"sequential: E = {e_text(last.log_e if last else None)} at the stop (max "
        f"{e_text(last.sup_log_e if last else None)}; 1/alpha = {1 / row.alpha:g}, {stop}); "
        f"{d.seeds_used} of {d.budget} seeds per group used, "
        f"{d.batches_run} batches of {d.batch}"
    )


def _trajectory(row: TestRow) -> tuple[TrajectoryPoint, ...]:
    return row.detail.trajectory if isinstance(row.detail, SequentialDetail) else ()


def trajectory_rows(row: TestRow) -> list[list[str]]:
    points = _trajectory(row)
    keep: list[int] = list(range(len(points)))
    if len(points) > MAX_TRAJECTORY_ROWS:
        step = (len(points) - 1) / (MAX_TRAJECTORY_ROWS - 1)
        keep = sorted({round(i * step) for i in range(MAX_TRAJECTORY_ROWS)})
    return [
        [
            str(i + 1),
            str(points[i].seeds),
            _log(points[i].log_e),
            e_text(points[i].log_e),
            e_text(points[i].sup_log_e),
        ]
        for i in keep
    ]


TRAJECTORY_HEADER = ["batch", "seeds per group", "log E", "E", "max E so far"]


def terminal_lines(evaluation: Evaluation) -> list[str]:
    """Below `run`'s table: the sequential summary and why the other rows are info."""
    row = eprocess_row(evaluation)
    return [] if row is None else [summary_line(row), WHY_INFO]


def markdown_lines(views: Sequence[ArchiveView], table: Callable) -> list[str]:
    out: list[str] = []
    for view in views:
        row = eprocess_row(view.evaluation)
        if row is None:
            continue
        out += ["", f"### Sequential verdict ({view.label})", "", summary_line(row), ""]
        out += table(TRAJECTORY_HEADER, trajectory_rows(row))
        out += ["", WHY_INFO]
    return out


def html_lines(views: Sequence[ArchiveView], table: Callable, escape: Callable) -> list[str]:
    out: list[str] = []
    for index, view in enumerate(views):
        row = eprocess_row(view.evaluation)
        if row is None:
            continue
        out += [f"<h2>Sequential verdict ({escape(view.label)})</h2>"]
        out += [f"<p>{escape(summary_line(row))}</p>"]
        svg = _plot(row, f"seq-{index}")
        if svg is not None:
            out += ["<figure>", svg, "<figcaption>log E after each batch; dashed: log(1/alpha)"]
            out += ["</figcaption></figure>"]
        out += table(TRAJECTORY_HEADER, trajectory_rows(row))
        out += [f"<p>{escape(WHY_INFO)}</p>"]
    return out


def _plot(row: TestRow, plot_id: str) -> str | None:
    try:
        import matplotlib  # noqa: F401  (the plots extra)
    except ImportError:
        return None
    from specconform.report.plots import render_svg

    points = _trajectory(row)
    threshold = (
        row.detail.log_threshold
        if isinstance(row.detail, SequentialDetail)
        else math.log(1 / row.alpha)
    )
    seeds = [p.seeds for p in points]
    # An infinite log E (impossible token) is drawn at the top edge.
    finite = [p.log_e for p in points if p.log_e is not None]
    top = max([threshold, *finite]) + 1.0
    values = [top if p.log_e is None else p.log_e for p in points]

    def draw(figure) -> None:
        axes = figure.add_subplot()
        axes.plot(seeds, values, marker="o", markersize=3)
        axes.axhline(threshold, color="black", linestyle="--", linewidth=1)
        axes.set_xlabel("seeds per group")
        axes.set_ylabel("log E")

    return render_svg(draw, plot_id=plot_id, size=(5.0, 2.6))


def _log(x: float | None) -> str:
    return "inf" if x is None else f"{x:.4g}"
