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
    ratio_parts,
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


def test_pass_bound_counts_loop_passes_only():
    # (K, d) = (2, 1), R = 4, every draft drafted: 3 shallow passes of 1 loop and 3 deep
    # loops, so a round is 6 passes against nospec's 4; heads cost nothing here.
    costs = ModelCosts(loops=4, loop_flops=1.0, head_flops=9.0, loop_bytes=1.0, head_bytes=9.0)
    b = speedup_bounds(costs, RoundShape(tokens=2.0, drafts=2.0), draft_loops=1)
    assert b.passes == pytest.approx(2.0 * 4 / 6)
    assert b.bandwidth < b.passes  # the heads' reads only lower the weight-read bound


def test_ratio_parts_multiply_back_to_the_measured_ratio():
    # Session 10's (K, d) = (2, 1) runs at c = 64 (docs/gpu-results/2026-12-04-session10-*).
    spec = {"tokens": 32768, "rounds": 268, "requests": 256, "ms_per_round": 11.92}
    nospec = {"tokens": 32768, "rounds": 508, "requests": 256, "ms_per_round": 7.18}
    shape = RoundShape(tokens=2.022, drafts=1.9)
    parts = ratio_parts(spec, nospec, 64, shape, loops=4, draft_loops=1)

    def tok_per_ms(run):
        return run["tokens"] / (run["rounds"] * run["ms_per_round"])

    assert parts.ratio == pytest.approx(tok_per_ms(spec) / tok_per_ms(nospec))
    assert parts.occupancy == pytest.approx(32768 / 268 / 64 / 2.022)
    assert parts.passes_ratio == pytest.approx((2.9 * 1 + 3) / 4)
    # Fewer slots than requests in flight: a run of 4 requests on 64 slots uses 4.
    one = {"tokens": 512, "rounds": 100, "requests": 4, "ms_per_round": 1.0}
    assert ratio_parts(one, one, 64, shape, 4, 1).slot_tokens == pytest.approx(512 / 100 / 4)
