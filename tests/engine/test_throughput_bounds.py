"""bench/throughput_bounds.py: the arithmetic beside engine_throughput's ratios.

Deterministic identities, no timing: a round that drafts nothing costs one nospec step
in both bounds; the per-token weights equal the built model's matrices; τ and w are
recovered from a run's totals."""

from __future__ import annotations

import pytest
import torch

from bench.throughput_bounds import (
    ModelCosts,
    RoundShape,
    model_costs,
    round_shape,
    speedup_bounds,
)
from engine_under_test import ModelConfig
from engine_under_test.model import build_model


def test_round_shape_from_a_runs_totals():
    # Request A: prefill token, rounds committing 4, 4, 1 (accepted 3, 3, 0), 3 drafts
    # each; request B: prefill, rounds committing 2, 3 (accepted 1, 2), 3 drafts each.
    shape = round_shape(tokens=1 + 9 + 1 + 5, requests=2, drafted=15, accepted=9)
    assert shape == RoundShape(tokens=14 / 5, drafts=3.0)
    assert round_shape(tokens=4, requests=4, drafted=0, accepted=0) is None  # no round


def test_a_round_without_drafts_is_one_nospec_step():
    costs = ModelCosts(loops=4, loop_flops=3.0, head_flops=5.0, loop_bytes=7.0, head_bytes=2.0)
    b = speedup_bounds(costs, RoundShape(tokens=1.0, drafts=0.0), draft_loops=2)
    assert b.compute == pytest.approx(1.0) and b.bandwidth == pytest.approx(1.0)


def test_every_draft_accepted_without_a_head():
    # τ = w + 1 and no head: FLOP-bound speculation gains nothing (the draft's loops
    # are reused by verification), weight-bound gains (w+1) R / ((w+1) d + R - d).
    costs = ModelCosts(loops=4, loop_flops=1.0, head_flops=0.0, loop_bytes=1.0, head_bytes=0.0)
    b = speedup_bounds(costs, RoundShape(tokens=4.0, drafts=3.0), draft_loops=2)
    assert b.compute == pytest.approx(1.0)
    assert b.bandwidth == pytest.approx(4 * 4 / (4 * 2 + 4 - 2))


def test_weights_per_token_are_the_models_matrices():
    cfg = ModelConfig.preset("tiny")
    model = build_model(cfg, torch.device("cpu"), torch.float32)
    named = dict(model.named_parameters())
    matrices = sum(p.numel() for n, p in named.items() if n.startswith("layers.") and p.ndim == 2)
    costs = model_costs(cfg, context=0.0, bytes_per_weight=4)
    assert costs.loop_bytes == 4 * matrices
    assert costs.head_bytes == 4 * named["lm_head.weight"].numel()
    assert costs.loop_flops == 2 * matrices  # no context: no attention FLOPs
    with pytest.raises(ValueError, match="bounds are stated for looped models"):
        model_costs(cfg.replace(architecture="llama", stage_layers=(1, 2)), 0.0, 2)
