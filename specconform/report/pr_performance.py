"""The performance table of the PR page: per cell (concurrency x sampling) each side's
committed tokens/s, TPOT and peak memory as mean ± SD [min, max] over its processes,
the ratio, and the pre-registered rule's outcome; then per side the profiler's time,
kernels and copies per phase, its top source locations, and the timeline's file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specconform.report.model import outcome, verdict_statement

SIDES = ("base", "candidate")
PHASES = ("draft", "verify", "accept", "collect", "other")


def _summary(s: dict | None, scale: float = 1.0, digits: int = 4) -> str:
    if not s or s.get("mean") is None:
        return "—"
    sd = "n/a" if s.get("sd") is None else f"{s['sd'] / scale:.{digits}g}"
    return (
        f"{s['mean'] / scale:.{digits}g} ± {sd} "
        f"[{s['min'] / scale:.{digits}g}, {s['max'] / scale:.{digits}g}]"
    )


def _peak(s: dict | None) -> str:
    """GiB; a peak equal in every process (CPU RSS often is) reads as one number."""
    if s and s.get("mean") is not None and s.get("min") == s.get("max"):
        return f"{s['mean'] / 2**30:.3g} (all {s['n']})"
    return _summary(s, 2**30, 3)


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
        cells = [r for r in ev.tests if r.test.startswith("tokens_per_s_")]
        design = item.view.row("abba_order")
        first = cells[0].detail if cells else {}
        n = first.get("sides", {}).get("base", {}).get("tokens_per_s", {}).get("n", "?")
        out.append(
            f"`{item.name}`: {_sides(item)}: **{ev.verdict.verdict}**; {n} processes per side, order "
            f"{'ABBA ' + outcome(design) if design else 'not recorded'}; "
            f"{verdict_statement(ev.verdict)}"
        )
        out.append("")
        rows = []
        for row in cells:
            d = row.detail
            s = d.get("sides", {})
            rows.append(
                [
                    str(d.get("concurrency")),
                    str(d.get("sampling")),
                    _summary(s.get("base", {}).get("tokens_per_s")),
                    _summary(s.get("candidate", {}).get("tokens_per_s")),
                    "—" if row.statistic is None else f"{row.statistic:.3f}",
                    _summary(s.get("base", {}).get("tpot_ms"), digits=3),
                    _summary(s.get("candidate", {}).get("tpot_ms"), digits=3),
                    " / ".join(_peak(s.get(side, {}).get("peak_memory_bytes")) for side in SIDES),
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
    sides = [s for s in SIDES if s in detail]
    if not sides:
        return []
    cuda = any(detail[s].get("device") == "cuda" for s in sides)
    unit = "device ms" if cuda else "CPU ms"
    key = "self_device_us" if cuda else "self_cpu_us"
    steps = ", ".join(f"{s} {detail[s].get('steps')}" for s in sides)
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
            p = detail[side]["phases"].get(phase, {})
            count = p.get("kernels") if cuda else p.get("ops")
            cells.append(f"{p.get(key, 0.0) / 1e3:.2f} ({count} / {p.get('copies')})")
        rows.append([phase, *cells])
    out += table(["phase", *sides], rows)
    for side in sides:
        top = detail[side].get("top") or []
        if not detail[side].get("phase_markers"):
            out.append(f"\n{side}: the tree has no phase ranges; everything reads as other.")
        if not detail[side].get("with_stack", True):
            out.append(f"\n{side}: profiled without Python stack (decoding failed): no locations.")
        if top:
            listed = "; ".join(f"`{t['location']}` {t.get(key, 0.0) / 1e3:.2f} ms" for t in top[:3])
            out.append(f"\nTop {side} locations by self {unit[:-3]} time: {listed}.")
    timelines = [n for n in _members(item) if n.startswith("plots/timeline-")]
    if timelines:
        out.append(f"\nTimeline (base above candidate): `{timelines[0]}` in the archive.")
    return out


def _members(item) -> list[str]:
    from specconform.evidence.reader import read_archive

    return sorted(read_archive(item.view.path).files)
