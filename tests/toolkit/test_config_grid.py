"""The configuration grid of ci_sequence (issue 35): every SamplingParams knob alone and
in every pair, greedy beside random in one batch, and laws for which the filter order
is visible.

docs/contracts.md fixes the order: temperature, then top-k, then top-p on the
renormalised top-k law. The grid tests that order only if, at the grid's own
configurations and prefixes, the swapped order (top-p on the full softmax, then top-k:
the planted ``filter_order_top_p_first``) is a different law. This test computes both
laws on the tiny model at prefixes the grid reaches and asserts they differ by a total
variation the protocol detects; the negative control is the configurations with one
filter only, where the order cannot matter and the two laws must be equal. That the
protocol does detect it at its seeds is measured, not assumed: docs/kill-matrix.md,
"Configuration, stop and stream bugs". Deterministic (fixed weights and seeds): no α.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
import yaml

from engine_under_test import DEFAULT_PROMPT, LLM, ModelConfig, SamplingParams
from engine_under_test.model import build_model
from engine_under_test.runners.scope_mutants import top_p_first_law
from engine_under_test.sampling import Sampler

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "ci_sequence.yaml"
KNOBS = ("temperature", "top_k", "top_p")
# The smallest mean TV between the two orders that ci_sequence's grid kills at its
# seeds (measured: docs/kill-matrix.md); the grid's k+p configurations must reach it.
DETECTED_TV = 0.02


def _protocol() -> dict:
    return yaml.safe_load(PROTOCOL.read_text())


def _on(cfg: dict, default: dict) -> frozenset[str]:
    """The knobs a sampling config switches on (temperature: != 1; filters: not off)."""
    t = cfg.get("temperature", default["temperature"])
    k = cfg.get("top_k", default["top_k"])
    p = cfg.get("top_p", default["top_p"])
    return frozenset(
        name for name, on in zip(KNOBS, (t not in (0.0, 1.0), 0 < k, p < 1.0), strict=True) if on
    )


def test_the_protocol_covers_every_knob_alone_and_in_pairs_with_greedy_beside_random():
    proto = _protocol()
    engine = proto["engine"]
    seen: set[frozenset[str]] = set()
    mixed = False
    for group in proto["groups"]:
        if group.get("mode") == "nospec":
            continue
        configs = group.get("sampling", [{}])
        seen |= {_on(c, engine) for c in configs}
        greedy = [c.get("temperature", engine["temperature"]) == 0.0 for c in configs]
        mixed |= any(greedy) and not all(greedy)
    wanted = {frozenset(c) for n in (1, 2) for c in itertools.combinations(KNOBS, n)}
    assert wanted <= seen, f"missing: {[sorted(c) for c in wanted - seen]}"
    assert mixed, "no speculative group runs greedy rows beside random rows"


@pytest.fixture(scope="module")
def grid_logits():
    """Target logits (temperature 1) at prefixes the grid reaches: both prompts and
    every 4th step of 8 clean generations of 40 tokens (fixed seeds 0..7)."""
    model = build_model(ModelConfig.preset("tiny", seed=0))
    llm = LLM(model=model)
    prompts = [list(DEFAULT_PROMPT), [7, 3, 101, 45, 9, 250, 12, 5]]
    params = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=40, ignore_eos=True) for s in range(8)
    ]
    outs = llm.generate(prompts * 4, params)
    prefixes = [
        pr + o.token_ids[:t]
        for pr, o in zip(prompts * 4, outs, strict=True)
        for t in range(0, 40, 4)
    ]
    return torch.stack(
        [llm.target_probabilities(p, SamplingParams(temperature=1.0)).log() for p in prefixes]
    )


def _order_tv(logits: torch.Tensor, t: float, k: int, p: float) -> torch.Tensor:
    """TV between the contract's law and the swapped order's at every prefix: [N]."""
    n = logits.shape[0]
    right = torch.stack(
        [
            Sampler.probabilities(logits[i], SamplingParams(temperature=t, top_k=k, top_p=p))
            for i in range(n)
        ]
    )
    wrong = top_p_first_law(
        logits, torch.full((n,), t), torch.full((n,), k), torch.full((n,), float(p))
    )
    return 0.5 * (right - wrong).abs().sum(-1)


def _grid_configs(both: bool) -> list[tuple[float, int, float]]:
    proto = _protocol()
    engine = proto["engine"]
    (grid,) = [g for g in proto["groups"] if g["name"] == "grid_async"]
    out = []
    for c in grid["sampling"]:
        t = c.get("temperature", engine["temperature"])
        k, p = c.get("top_k", engine["top_k"]), c.get("top_p", engine["top_p"])
        if t > 0 and (0 < k and p < 1.0) == both:
            out.append((t, k, p))
    return sorted(set(out))


def test_the_filter_order_changes_the_law_at_the_grid_configurations(grid_logits):
    configs = _grid_configs(both=True)
    assert configs
    for t, k, p in configs:
        tv = _order_tv(grid_logits, t, k, p)
        assert float(tv.mean()) >= DETECTED_TV, (t, k, p, float(tv.mean()))
        assert float((tv > 1e-6).float().mean()) >= 0.25, (t, k, p)


def test_negative_control_one_filter_alone_is_blind_to_the_order(grid_logits):
    configs = _grid_configs(both=False)
    assert configs
    for t, k, p in configs:
        assert float(_order_tv(grid_logits, t, k, p).max()) < 1e-6, (t, k, p)
