"""CUDA Graph capture and replay of a round, one graph per round shape.

``GraphedRound(fn, protect)`` wraps ``fn(*key) -> tuple of tensors``, a round whose
inputs all live in persistent device tensors (slot state, RNG registry, KV cache); the
key is the round's static shape (batch bucket B, draft width W). The first
``eager_uses`` calls for a key (default 2) run ``fn`` eagerly: a capture costs its
warm-up runs plus the capture itself (about 0.8 s at B = 5,000 on the small preset), so
a shape used once or twice -- fp32_t2's 5,000-request batches of 3 tokens, the tail
buckets of a generation -- is cheaper without one (eager and replayed rounds run the
same kernels on the same inputs, so results are equal). The next call for the key
captures one graph in a shared memory pool. A key captured at its first use (``eager_uses
= 0``: benchmarks, the performance worker) is first warmed up ``warmup`` times on a side
stream (lazy CUDA/cuBLAS initialisation, Triton compilation), and the tensors that the
warm-up mutated are restored (``protect()``: slot state and RNG counters; the warm-up's
KV writes land past the committed tokens, where the real round rewrites them). A key
that already ran eagerly skips the warm-up: its eager calls did that initialisation on
the same shapes, and at B = 5,000 each warm-up is a whole device-bound round (fp32_t2 at
20,000 seeds paid two of them per speculative group, 1.1-1.7 s).
Every later call replays it and returns the same static output tensors, which the next
replay overwrites: the async runner clones them on the compute stream right after the
replay and hands the clones to ``HostTransfer``.

Capture needs every shape static and no host synchronisation inside ``fn``; both are
properties of the round (see spec_round.py). ``invalidate()`` drops every graph, e.g.
after the KV cache or a slot-state tensor was reallocated.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch


class GraphedRound:
    def __init__(
        self,
        fn: Callable[..., tuple],
        protect: Callable[[], list[torch.Tensor]],
        device: torch.device,
        warmup: int = 2,
        eager_uses: int = 2,
    ):
        self.fn = fn
        self.protect = protect
        self.device = device
        self.warmup = warmup
        self.eager_uses = eager_uses
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, tuple]] = {}
        self.uses: dict[tuple, int] = {}  # eager calls so far per key (kept on invalidate)
        self.pool = None
        self.captures = 0
        self.replays = 0
        self.eager_calls = 0
        self.warmup_runs = 0

    def invalidate(self) -> None:
        # Dropping the graphs frees their memory pool: later captures need a new one.
        self.graphs.clear()
        self.pool = None

    def _warm_up(self, key: tuple) -> None:
        stream = torch.cuda.current_stream(self.device)
        saved = [t.clone() for t in self.protect()]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self.fn(*key)
                self.warmup_runs += 1
        stream.wait_stream(side)
        for t, v in zip(self.protect(), saved, strict=True):
            t.copy_(v)

    def _capture(self, key: tuple):
        if self.uses.get(key, 0) == 0:
            self._warm_up(key)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # No cyclic garbage collection while capturing. An engine dropped earlier (its
        # graphs hold the runner through the round function: a reference cycle) may be
        # collected by an automatic gc pass triggered by the capture's own Python
        # allocations; its CUDAGraph's destructor then calls cudaGraphExecDestroy,
        # which is not permitted while a stream captures, and invalidates this capture
        # (cudaErrorStreamCaptureInvalidated, "operation not permitted when stream is
        # capturing (function reset)"). torch.cuda.graph no longer runs gc.collect()
        # on entry by default, so collect here, before capture, and hold gc off.
        gc.collect()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = self.fn(*key)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.captures += 1
        self.graphs[key] = (graph, outputs)
        return self.graphs[key]

    def __call__(self, *key) -> tuple:
        entry = self.graphs.get(key)
        if entry is None:
            used = self.uses.get(key, 0)
            if used < self.eager_uses:
                self.uses[key] = used + 1
                self.eager_calls += 1
                return self.fn(*key)
            entry = self._capture(key)
        graph, outputs = entry
        graph.replay()
        self.replays += 1
        return outputs
