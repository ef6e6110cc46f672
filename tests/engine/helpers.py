"""Shared pieces of the engine tests: the default prompt and modes, host-read guards,
and the tie-heavy sampling case that both the CPU and the CUDA path are checked on."""

from __future__ import annotations

import torch

from engine_under_test import DEFAULT_PROMPT, SpeculativeConfig

PROMPT = list(DEFAULT_PROMPT)
SPEC = SpeculativeConfig(3, "block", 2)  # K = 3 drafts at draft_loops = 2
MODES = {
    "nospec": dict(speculative_config=None),
    "sync": dict(speculative_config=SPEC),
    "async": dict(speculative_config=SPEC, async_scheduling=True),
}

# Tensor methods that copy to the host (on CUDA: a sync).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def forbid_host_reads(patch, where: str) -> None:
    """Make every host read of a tensor raise AssertionError("host read <where>").

    patch: pytest's monkeypatch (or one of its contexts). On CPU a host read cannot be
    seen as a sync, so the calls that would be one are forbidden instead."""

    def boom(*args, **kwargs):
        raise AssertionError(f"host read {where}")

    for name in HOST_READS:
        patch.setattr(torch.Tensor, name, boom)


def submit_traced_round(llm, params, patch, where: str):
    """Add one traced request per ``params`` (ids 0, 1, ...), step three times, then
    submit a traced round and its host view with host reads forbidden (``patch``:
    pytest's monkeypatch; ``where``: named in the error). Returns (rows, out, view)."""
    runner = llm.runner
    for i, p in enumerate(params):
        llm.add_request(i, PROMPT, p)
        runner.waiting[-1].output.trace = []
    for _ in range(3):
        llm.step()
    B = runner.bucket()
    rows = runner.snapshot(B)
    runner.law_trace = True
    with patch.context() as ctx:
        forbid_host_reads(ctx, where)
        out = runner.submit_round(B, runner.draft_width(rows, runner.K))
        view = runner.host_view(out, rows)
    runner.law_trace = False
    return rows, out, view


def small_tie_case(g: torch.Generator, B: int = 160, V: int = 24):
    """Integer-valued logits on a small vocabulary, so ties in logits and probabilities
    are common (top-k ties, top-p cuts inside tie groups), with random T (10% greedy),
    k in [-2, V + 2] and top-p (20% off). Draws from `g` in a fixed order.

    returns logits [B, V] float32, t [B] float32, k [B] int64, p [B] float32"""
    logits = torch.randint(-4, 5, (B, V), generator=g).float() * torch.rand(B, 1, generator=g)
    t = torch.rand(B, generator=g).mul(2.0).where(torch.rand(B, generator=g) > 0.1, 0.0)
    k = torch.randint(-2, V + 3, (B,), generator=g)
    p = torch.rand(B, generator=g).where(torch.rand(B, generator=g) > 0.2, 1.0).clamp_min(0.01)
    return logits, t, k, p


def deep_mutant_names() -> list[str]:
    """The engine mutants that act only past the first draft position (their registry
    block in engine_under_test.mutants, implemented in runners/deep_mutants.py)."""
    return [
        "deep_position_temp",
        "late_round_residual",
        "bonus_after_accepts",
        "next_input_partial",
        "rng_reused_rounds",
        "rng_shared_requests",
        "filter_order_temp",
        "top_p_drop_crossing",
        "slot_stale_params",
        "greedy_row_sampled",
    ]


def scope_mutant_names() -> list[str]:
    """The engine mutants that act only in one configuration, at a stop or in one random
    stream (issue 35; runners/scope_mutants.py), checked where they act:
    tests/engine/test_stops.py, test_streams.py, tests/toolkit/test_config_grid.py."""
    return [
        "filter_order_top_p_first",
        "stop_commits_next",
        "rng_draft_overlaps_coins",
        "rng_bonus_overlaps_next_round",
    ]
