"""GraphedRound's eager-first policy on any device: a round shape runs eagerly for its
first ``eager_uses`` calls, counted per key (capture and replay themselves need CUDA:
tests/engine/test_engine_gpu.py::test_a_shape_runs_eagerly_before_it_is_captured)."""

from __future__ import annotations

import torch

from engine_under_test.runners.cuda_graphs import GraphedRound


def test_first_uses_of_each_shape_run_eagerly_and_are_counted_per_key():
    calls = []

    def round_fn(B, W):
        calls.append((B, W))
        return (torch.full((B,), float(W)),)

    graphed = GraphedRound(round_fn, lambda: [], torch.device("cpu"), eager_uses=2)
    for key in [(4, 1), (4, 1), (8, 1)]:
        (out,) = graphed(*key)
        assert out.shape == (key[0],) and float(out[0]) == key[1]
    assert calls == [(4, 1), (4, 1), (8, 1)]
    assert graphed.uses == {(4, 1): 2, (8, 1): 1}
    assert graphed.eager_calls == 3 and graphed.captures == 0 and graphed.graphs == {}
    graphed.invalidate()  # dropping graphs keeps the counts: a warm shape captures next
    assert graphed.uses == {(4, 1): 2, (8, 1): 1}
