"""Greedy speculation (sync and async, several K and d) is token-identical to nospec."""

from __future__ import annotations

import random

import pytest
import torch

from engine_under_test import LLM, ModelConfig, SamplingParams, SpeculativeConfig
from engine_under_test.model import build_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(1)
    return [[rng.randrange(1, 512) for _ in range(rng.randrange(3, 20))] for _ in range(10)]


@pytest.fixture(scope="module")
def nospec_tokens(model, prompts):
    outs = LLM(model=model).generate(prompts, GREEDY)
    assert all(len(o.token_ids) == 128 and o.finish_reason == "length" for o in outs)
    return [o.token_ids for o in outs]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("K,d", [(3, 2), (4, 1), (2, 3)])
def test_greedy_speculation_equals_nospec(model, prompts, nospec_tokens, asynchronous, K, d):
    llm = LLM(
        model=model,
        speculative_config=SpeculativeConfig(K, "block", d),
        async_scheduling=asynchronous,
    )
    outs = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == nospec_tokens
    for o in outs:
        assert o.finish_reason == "length"
        assert all(0 <= r.accepted <= r.drafted <= K for r in o.rounds)
        assert sum(r.accepted + 1 for r in o.rounds) >= 127  # every round commits a+1
    assert sum(o.num_accepted for o in outs) > 0


def test_pipeline_mode_serves_greedy(model, prompts, nospec_tokens):
    llm = LLM(model=model, speculative_config=SpeculativeConfig(3, "pipeline", 2))
    outs = llm.generate(prompts[:3], GREEDY)
    assert [o.token_ids for o in outs] == nospec_tokens[:3]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_greedy_rows_unchanged_next_to_random_rows(model, prompts, nospec_tokens, asynchronous):
    """Mixed batch: greedy rows keep greedy acceptance; random rows around them."""
    llm = LLM(
        model=model,
        speculative_config=SpeculativeConfig(3, "block", 2),
        async_scheduling=asynchronous,
    )
    mixed, params = [], []
    for i, p in enumerate(prompts[:5]):
        mixed += [p, p]
        params += [
            GREEDY,
            SamplingParams(
                temperature=1.0, top_k=20, seed=100 + i, max_tokens=128, ignore_eos=True
            ),
        ]
    outs = llm.generate(mixed, params)
    assert [o.token_ids for o in outs[0::2]] == nospec_tokens[:5]
    assert all(o.seed is None for o in outs[0::2])  # greedy: no generator
    assert [o.token_ids for o in outs[1::2]] != nospec_tokens[:5]


def test_greedy_identical_in_bf16_across_modes(model):
    """bf16 weights: sync and async speculation agree with each other exactly."""
    m16 = build_model(ModelConfig.preset("tiny", seed=0), dtype=torch.bfloat16)
    prompt = [[5, 9, 200, 31]]
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    spec = SpeculativeConfig(3, "block", 2)
    a = LLM(model=m16, speculative_config=spec).generate(prompt, params)
    b = LLM(model=m16, speculative_config=spec, async_scheduling=True).generate(prompt, params)
    assert a[0].token_ids == b[0].token_ids and len(a[0].token_ids) == 32
