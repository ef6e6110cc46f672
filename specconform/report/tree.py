"""Tree runs in reports (issue 34): a lossy sampler's total-variation distance from the
target law, with its interval, per threshold setting, case and committed position; and a
plot of the estimate against the setting (HTML, when the plots extra is installed).

Reads the ``TreeTVDetail`` rows of a tree run (:mod:`specconform.kinds.tree`); archives
without them contribute nothing. One set of lines for the terminal table (`run`),
Markdown and HTML.
"""

from __future__ import annotations

from specconform.details.tree import TreeTVDetail
from specconform.report.model import ArchiveView
from specconform.report.section import DetailSection
from specconform.results import Evaluation, TestRow


class TreeTVSection(DetailSection[TreeTVDetail]):
    title = "Distance from the target law"
    header = ["test", "threshold_single", "threshold_acc", "TV estimate", "interval", "max_tv",
              "result"]  # fmt: skip
    intro = "TV from the target law (estimate [interval] vs max_tv):"

    def rows(self, evaluation: Evaluation) -> list[tuple[TestRow, TreeTVDetail]]:
        return [(t, t.detail) for t in evaluation.tests if isinstance(t.detail, TreeTVDetail)]

    def cells(self, row: TestRow, d: TreeTVDetail) -> list[str]:
        return [row.test, f"{d.threshold_single:g}", f"{d.threshold_acc:g}", f"{d.estimate:.4f}",
                f"[{d.lower:.4f}, {d.upper:.4f}]", f"{d.max_tv:g}", row.status]  # fmt: skip

    def line(self, row: TestRow, d: TreeTVDetail) -> str:
        return (
            f"  {row.test}: ts={d.threshold_single:g} ta={d.threshold_acc:g}  "
            f"{d.estimate:.4f} [{d.lower:.4f}, {d.upper:.4f}] vs {d.max_tv:g}  {row.status}"
        )

    def notes(self, rows) -> list[str]:
        d = rows[0][1]
        return [
            f"TV intervals simultaneous at {d.confidence:.4%} (Bonferroni over the TV rows); "
            f"method: {d.method}."
        ]

    def figure(self, view: ArchiveView, rows) -> list[str]:
        svg = tv_plot(rows, plot_id=f"tree-tv-{view.run_id[:8]}")
        if not svg:
            return []
        return ["<figure>", svg, "<figcaption>TV estimate (interval) per threshold setting, "
                "one line per case and position; dashed: max_tv.</figcaption>", "</figure>"]  # fmt: skip


TREE_TV_SECTION = TreeTVSection()


def tv_plot(rows: list[tuple[TestRow, TreeTVDetail]], *, plot_id: str) -> str | None:
    """TV estimate with its interval against the setting (x: the settings in protocol
    order, labelled ts/ta), one series per (case, position); None without matplotlib."""
    try:
        from specconform.report.plots import render_svg
    except ImportError:  # pragma: no cover - the plots extra
        return None
    settings = sorted({(d.setting, d.threshold_single, d.threshold_acc) for _, d in rows})
    x_of = {s[0]: i for i, s in enumerate(settings)}
    series: dict[tuple[str, int], list[TreeTVDetail]] = {}
    for _, d in rows:
        series.setdefault((d.case, d.position), []).append(d)
    max_tv = rows[0][1].max_tv

    def draw(fig) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for (case, pos), ds in sorted(series.items()):
            ds = sorted(ds, key=lambda d: d.setting)
            xs = [x_of[d.setting] for d in ds]
            ys = [d.estimate for d in ds]
            err = [[d.estimate - d.lower for d in ds], [d.upper - d.estimate for d in ds]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{case} pos {pos}")
        ax.axhline(max_tv, linestyle="--", color="black", linewidth=1)
        ax.set_xticks(range(len(settings)))
        ax.set_xticklabels([f"ts={s[1]:g}\nta={s[2]:g}" for s in settings])
        ax.set_ylabel("TV(committed, target)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6, ncol=2)

    try:
        return render_svg(draw, plot_id=plot_id, size=(7.0, 3.6))
    except ImportError:  # pragma: no cover - the plots extra
        return None
