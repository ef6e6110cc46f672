"""The performance table of the PR page: per cell (concurrency x sampling) each side's
committed tokens/s, TPOT and peak memory as mean ± SD [min, max] over its processes,
the ratio, and the pre-registered rule's outcome; then per side the profiler's time,
kernels and copies per phase, its top source locations, and the timeline's file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specconform.details.runs import (
    LocationTotals,
    MetricSummary,
    PhaseTotals,
    ProfileDetail,
    ThroughputDetail,
)
from specconform.report.model import outcome, verdict_statement
from specconform.results import TestRow

SIDES = ("base", "candidate")
PHASES = ("draft", "verify", "accept", "collect", "other")


def _summary(s: MetricSummary | None, scale: float = 1.0, digits: int = 4) -> str:
    if s is None or s.mean is None or s.min is None or s.max is None:
        return "—"
    sd = "n/a" if s.sd is None else f"{s.sd / scale:.{digits}g}"
    return (
        f"{s.mean / scale:.{digits}g} ± {sd} "
        f"[{s.min / scale:.{digits}g}, {s.max / scale:.{digits}g}]"
    )


def _peak(s: MetricSummary | None) -> str:
    """GiB; a peak equal in every process (CPU RSS often is) reads as one number."""
    if s is not None and s.mean is not None and s.min == s.max:
        return f"{s.mean / 2**30:.3g} (all {s.n})"
    return _summary(s, 2**30, 3)


def _throughput(row: TestRow) -> ThroughputDetail | None:
    return row.detail if isinstance(row.detail, ThroughputDetail) else None


def _metric(d: ThroughputDetail, side: str, metric: str) -> MetricSummary | None:
    return d.sides.get(side, {}).get(metric)


def _sides(item) -> str:
    sides = item.view.run.get("performance_sides") or {}
    if sides:
        return " vs ".join(f"{k} {v}" for k, v in sides.items())
    return "base vs candidate"


def performance_section(items: Sequence, table: Callable) -> list[str]:
    if not items:
        return []
    out = ["", "### Performance", ""]
    for item in items:
        ev = item.view.evaluation
        cells = [
            r
            for r in ev.tests
            if r.test.startswith("tokens_per_s_") and isinstance(r.detail, ThroughputDetail)
        ]
        design = item.view.row("abba_order")
        first = _throughput(cells[0]) if cells else None
        base_n = None if first is None else _metric(first, "base", "tokens_per_s")
        n = "?" if base_n is None else base_n.n
        out.append(
            f"`{item.name}`: {_sides(item)}: **{ev.verdict.verdict}**; {n} processes per side, order "
            f"{'ABBA ' + outcome(design) if design else 'not recorded'}; "
            f"{verdict_statement(ev.verdict)}"
        )
        out.append("")
        rows = []
        for row in cells:
            d = _throughput(row)
            if d is None:
                continue
            rows.append(
                [
                    str(d.concurrency),
                    str(d.sampling),
                    _summary(_metric(d, "base", "tokens_per_s")),
                    _summary(_metric(d, "candidate", "tokens_per_s")),
                    "—" if row.statistic is None else f"{row.statistic:.3f}",
                    _summary(_metric(d, "base", "tpot_ms"), digits=3),
                    _summary(_metric(d, "candidate", "tpot_ms"), digits=3),
                    " / ".join(_peak(_metric(d, side, "peak_memory_bytes")) for side in SIDES),
                    outcome(row) + ("" if row.deciding else " (not deciding)"),
                ]
            )
        out += table(
            [
                "conc",
                "sampling",
                "base tok/s",
                "candidate tok/s",
                "ratio",
                "base TPOT ms",
                "candidate TPOT ms",
                "peak GiB (base / cand.)",
                "result",
            ],
            rows,
        )
        out += _profile_lines(item, table)
        out.append("")
    return out[:-1]


def _profile_lines(item, table: Callable) -> list[str]:
    row = item.view.row("profile")
    if row is None:
        return []
    detail = row.detail
    if not isinstance(detail, ProfileDetail):
        return []
    profiles = {s: prof for s in SIDES if (prof := detail.side(s)) is not None}
    sides = list(profiles)
    if not sides:
        return []
    cuda = any(p.device == "cuda" for p in profiles.values())
    unit = "device ms" if cuda else "CPU ms"

    def own_time(t: PhaseTotals | LocationTotals) -> float:
        return t.self_device_us if cuda else t.self_cpu_us

    steps = ", ".join(f"{s} {p.steps}" for s, p in profiles.items())
    out = [
        "",
        f"Profiler attribution ({unit} per phase over a fixed window of steps: {steps}; "
        + ("kernels / copies" if cuda else "aten calls / copies")
        + " in brackets):",
        "",
    ]
    rows = []
    for phase in PHASES:
        cells = []
        for side in sides:
            p = profiles[side].phases.get(phase)
            if p is None:
                cells.append("0.00 (None / None)")
                continue
            count = p.kernels if cuda else p.ops
            cells.append(f"{own_time(p) / 1e3:.2f} ({count} / {p.copies})")
        rows.append([phase, *cells])
    out += table(["phase", *sides], rows)
    for side, prof in profiles.items():
        top = prof.top
        if not prof.phase_markers:
            out.append(f"\n{side}: the tree has no phase ranges; everything reads as other.")
        if prof.with_stack is False:
            out.append(f"\n{side}: profiled without Python stack (decoding failed): no locations.")
        if top:
            listed = "; ".join(f"`{t.location}` {own_time(t) / 1e3:.2f} ms" for t in top[:3])
            out.append(f"\nTop {side} locations by self {unit[:-3]} time: {listed}.")
    timelines = [n for n in _members(item) if n.startswith("plots/timeline-")]
    if timelines:
        out.append(f"\nTimeline (base above candidate): `{timelines[0]}` in the archive.")
    return out


def _members(item) -> list[str]:
    from specconform.evidence.reader import read_archive

    return sorted(read_archive(item.view.path).files)
