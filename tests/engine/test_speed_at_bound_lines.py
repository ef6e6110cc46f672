"""bench/speed_at_bound.py's kernels part: which line a sampling_core row is judged by.

At B = 4,096 the memory floor is milliseconds and the kernel is judged against 1.2x it;
at B = 1 and 64 the floor is nanoseconds (launch latency dominates, H100 2026-12-07:
ratios of 12-1,273 that say nothing about the kernel), so the floor ratio is kept without
a line and the graph-replayed latency is judged against 50 us instead."""

from bench.speed_at_bound import LATENCY_LINE_US, kernel_figures


def _row(B, floor_ms, triton_ms, graph_ms=None):
    row = {"op": "speculative_accept", "B": B, "floor_ms": floor_ms, "triton_ms": triton_ms}
    row["triton_ratio"] = triton_ms / floor_ms
    if graph_ms is not None:
        row["triton_graph_ms"] = graph_ms
    return row


def test_bandwidth_bound_rows_keep_the_floor_line():
    (fig,) = kernel_figures(_row(4096, 0.4693, 0.4933, graph_ms=0.48))
    assert fig.line == "<= 1.2" and fig.ok is True
    (slow,) = kernel_figures(_row(4096, 0.4693, 0.60))  # 1.28x: below the line
    assert slow.ok is False


def test_latency_bound_rows_are_judged_by_graph_latency():
    floor, latency = kernel_figures(_row(1, 0.0001, 0.1656, graph_ms=0.012))
    assert floor.ok is None and "latency line applies" in floor.note
    assert latency.value == 12.0 and latency.ok is True
    (_, over) = kernel_figures(_row(64, 0.007, 0.1558, graph_ms=(LATENCY_LINE_US + 1) / 1e3))
    assert over.ok is False  # negative control: a regression past the line shows


def test_no_capture_no_latency_figure():
    figs = kernel_figures(_row(1, 0.0001, 0.1656))
    assert len(figs) == 1 and figs[0].ok is None
