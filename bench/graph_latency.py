"""Per-call time of an op replayed from a CUDA Graph: its latency as the engine sees it.

The engine replays its rounds from CUDA Graphs, so at small batches (B = 1 .. 64, where
one row's bytes take nanoseconds at full bandwidth) an op costs its kernels' device
latency, not its Python wrapper's launch time. ``graph_ms`` captures ``calls``
back-to-back calls of ``fn`` (static inputs, no host reads) in one graph and times its
replays with CUDA events. Used by bench/sampling_core.py for the small-B latency line of
bench/speed_at_bound.py.
"""

from __future__ import annotations

import torch


def graph_ms(fn, calls: int = 20, replays: int = 5) -> float | None:
    """Milliseconds per call of ``fn`` under CUDA Graph replay; None where the op cannot
    be captured (a host read, an allocation the capture refuses): then no latency figure."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):  # warm-up off the capture (lazy inits, autotune)
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return None
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (replays * calls)
