"""Profiler attribution (torch-free): per-phase counts and times, the top source locations
and the timeline picture, from the records the performance worker writes.

A side's raw profile (``raw/performance.json`` -> ``profile.<side>``)::

    {"device": "cpu" | "cuda", "steps": int, "concurrency": int, "sampling": str,
     "phase_markers": bool,          # False: the tree has no phase ranges (all "other")
     "with_stack": bool,             # False: stack decoding failed, locations unknown
     "ops": [{"phase", "name", "location", "count", "self_cpu_us", "self_device_us",
              "kernels", "copies"}, ...],
     "spans": [{"phase", "start_us", "end_us"}, ...]}   # one request, window-relative

``ops`` aggregates the profiler's operator events by (phase, operator, source location):
``phase`` is the innermost enclosing ``phase:<name>`` range (draft, verify, accept,
collect; none: other), ``kernels`` the device kernels the operator launched and
``copies`` the device memcpy/memset among them (CPU: ``aten::copy_`` calls, since no
device kernels exist there), ``self_device_us`` their device time (CPU: 0; CPU runs
rank by ``self_cpu_us`` instead).
"""

from __future__ import annotations

from collections import defaultdict
from xml.sax.saxutils import escape

from specconform.details.runs import LocationTotals, PhaseTotals, SideProfile

PHASES = ("draft", "verify", "accept", "collect", "other")
PHASE_COLOURS = {
    "draft": "#4c78a8",
    "verify": "#f58518",
    "accept": "#54a24b",
    "collect": "#b279a2",
    "other": "#bab0ac",
}


def phase_table(profile: dict) -> SideProfile:
    """Per phase: operator calls, kernels, copies, self CPU and device time; and the top
    source locations by self device time (CPU: self CPU time)."""
    phases = {
        p: {"ops": 0, "kernels": 0, "copies": 0, "self_cpu_us": 0.0, "self_device_us": 0.0}
        for p in PHASES
    }
    by_location: dict[str, dict] = defaultdict(
        lambda: {"self_cpu_us": 0.0, "self_device_us": 0.0, "count": 0}
    )
    for op in profile["ops"]:
        # A sub-phase (``draft.sample``) counts in its parent; archives without them
        # recompute unchanged.
        parent = op["phase"].split(".", 1)[0]
        phase = parent if parent in phases else "other"
        entry = phases[phase]
        entry["ops"] += int(op["count"])
        entry["kernels"] += int(op["kernels"])
        entry["copies"] += int(op["copies"])
        entry["self_cpu_us"] += float(op["self_cpu_us"])
        entry["self_device_us"] += float(op["self_device_us"])
        # A Python function event is its own location; an operator reads "op @ line".
        key = op["location"] if ".py(" in op["name"] else f"{op['name']} @ {op['location']}"
        where = by_location[key]
        where["self_cpu_us"] += float(op["self_cpu_us"])
        where["self_device_us"] += float(op["self_device_us"])
        where["count"] += int(op["count"])
    rank_by = "self_device_us" if profile.get("device") == "cuda" else "self_cpu_us"
    top = sorted(by_location.items(), key=lambda kv: (-kv[1][rank_by], kv[0]))
    # Only a window profiled without stack says so: archives written before the field
    # existed (all with stack) recompute to the same detail.
    return SideProfile(
        with_stack=None if profile.get("with_stack", True) else False,
        device=profile.get("device"),
        steps=int(profile.get("steps", 0)),
        phase_markers=bool(profile.get("phase_markers", False)),
        phases={
            p: PhaseTotals(
                ops=int(e["ops"]),
                kernels=int(e["kernels"]),
                copies=int(e["copies"]),
                self_cpu_us=e["self_cpu_us"],
                self_device_us=e["self_device_us"],
            )
            for p, e in phases.items()
        },
        ranked_by=rank_by,
        top=tuple(
            LocationTotals(
                location=loc,
                self_cpu_us=vals["self_cpu_us"],
                self_device_us=vals["self_device_us"],
                count=int(vals["count"]),
            )
            for loc, vals in top[: int(profile.get("top", 10))]
        ),
    )


def timeline_svg(profiles: dict, *, title: str = "timeline of one request") -> str:
    """An SVG of each side's phase spans over the profiled window: base above candidate,
    one lane per side, time left to right (each side on its own scale: the lanes show
    where time goes, the tokens/s rows say which side is faster)."""
    width, lane, pad, label = 900, 36, 8, 90
    sides = [s for s in ("base", "candidate") if s in profiles]
    height = 40 + len(sides) * (lane + pad) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<text x="{pad}" y="18" font-weight="bold">{escape(title)}</text>',
    ]
    for i, side in enumerate(sides):
        spans = profiles[side].get("spans", [])
        y = 30 + i * (lane + pad)
        end = max((float(s["end_us"]) for s in spans), default=1.0) or 1.0
        scale = (width - label - pad) / end
        out.append(f'<text x="{pad}" y="{y + lane / 2 + 4}">{side}</text>')
        out.append(
            f'<rect x="{label}" y="{y}" width="{width - label - pad}" height="{lane}" '
            f'fill="{PHASE_COLOURS["other"]}"/>'
        )
        for span in sorted(spans, key=lambda s: float(s["start_us"])):
            x0 = label + float(span["start_us"]) * scale
            w = max((float(span["end_us"]) - float(span["start_us"])) * scale, 0.5)
            colour = PHASE_COLOURS.get(span["phase"], PHASE_COLOURS["other"])
            out.append(
                f'<rect x="{x0:.2f}" y="{y}" width="{w:.2f}" height="{lane}" fill="{colour}">'
                f"<title>{escape(span['phase'])} {float(span['end_us']) - float(span['start_us']):.0f} us"
                "</title></rect>"
            )
        out.append(
            f'<text x="{width - pad}" y="{y + lane + 11}" text-anchor="end" font-size="10">'
            f"{end / 1e3:.2f} ms</text>"
        )
    x = label
    y = height - 12
    for phase in PHASES:
        out.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{PHASE_COLOURS[phase]}"/>'
        )
        out.append(f'<text x="{x + 14}" y="{y}">{phase}</text>')
        x += 90
    out.append("</svg>")
    return "\n".join(out) + "\n"
