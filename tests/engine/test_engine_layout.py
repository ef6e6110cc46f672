"""Layout regression (contract 1): when a non-argmax draft is accepted, the host's
committed sequence, the next round's device input and the per-depth KV cache all equal
a serial replay of the committed tokens."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import (
    LLM,
    SamplingParams,
    SpeculativeConfig,
)
from engine_under_test.sampling import Sampler
from tests.engine.helpers import PROMPT

K, D = 3, 2


def params(seed: int) -> SamplingParams:
    return SamplingParams(temperature=1.0, top_k=20, seed=seed, max_tokens=9, ignore_eos=True)


def make_llm(model, asynchronous):
    return LLM(
        model=model,
        speculative_config=SpeculativeConfig(K, "block", D),
        async_scheduling=asynchronous,
    )


@pytest.fixture(scope="module")
def non_argmax_seed(model):
    """A seed whose first round accepts a draft t2 that is not the target argmax."""
    llm = make_llm(model, False)
    outs = llm.generate([PROMPT] * 200, [params(s) for s in range(200)])
    for s, o in enumerate(outs):
        if not o.first_draft_accepted:
            continue
        t1, t2 = o.token_ids[:2]
        p = llm.target_probabilities(PROMPT + [t1], params(s))
        if int(p.argmax()) != t2:
            return s, o.token_ids
    pytest.fail("no seed accepted a non-argmax draft")


def serial_kv(model, tokens: list[int]):
    """Per-depth KV of one full serial forward of `tokens`: [R, L, G, T, hd] each."""
    cache = model.new_cache(1, len(tokens))
    model.reference_logits(tokens, cache=cache)
    return cache.k[:, :, 0], cache.v[:, :, 0]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_layout_matches_serial_replay(model, non_argmax_seed, asynchronous):
    seed, expected = non_argmax_seed
    llm = make_llm(model, asynchronous)
    llm.runner.trace = []
    out = llm.generate([PROMPT], params(seed))[0]
    # Same seed alone or among 199 others: the same committed tokens (request-owned RNG).
    assert out.token_ids == expected
    tokens = out.token_ids

    # 1. Host output: every round committed accepted drafts + one correction/bonus, and
    #    every committed token is in the support of the serial law p(. | prefix).
    assert sum(r.accepted + 1 for r in out.rounds) >= len(tokens) - 1
    for i, t in enumerate(tokens):
        p = llm.target_probabilities(PROMPT + tokens[:i], params(seed))
        assert p[t] > 0, f"token {i} ({t}) outside the support of p"

    # 2. Next round's device input == the host's last committed token, at its position.
    committed = 1  # t1 from prefill
    live_rounds = [h for serials, h in llm.runner.trace if h["live"][0]]
    assert len(live_rounds) == len(out.rounds)
    for h in live_rounds:
        assert int(h["input_token"][0]) == tokens[committed - 1]
        assert int(h["pos"][0]) == len(PROMPT) + committed - 1
        committed += int(h["num_committed"][0])
    assert committed >= len(tokens)

    # 3. Per-depth KV of every fed position equals the serial replay at every depth.
    fed = PROMPT + tokens[:-1]  # the last committed token is never fed
    k_ref, v_ref = serial_kv(model, fed)
    cache = llm.runner.cache
    n = len(fed)
    tol = dict(atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(cache.k[:, :, 0, :, :n], k_ref[:, :, :, :n], **tol)
    torch.testing.assert_close(cache.v[:, :, 0, :, :n], v_ref[:, :, :, :n], **tol)


def test_accepted_draft_is_not_the_argmax(model, non_argmax_seed):
    """The regression's premise: t2 was a random (non-argmax) accepted draft."""
    seed, tokens = non_argmax_seed
    p = Sampler.probabilities(model.reference_logits(PROMPT + tokens[:1])[-1], params(seed))
    assert int(p.argmax()) != tokens[1] and p[tokens[1]] > 0


def test_cache_length_is_tight_while_short_and_in_full_tiles_when_long():
    from engine_under_test.runners.state import cache_length

    # fp32_t2's 12 + 3 + 4 positions: 24, not a 64-position row that attention reads whole
    assert [cache_length(n) for n in (1, 8, 9, 19, 64)] == [8, 8, 16, 24, 64]
    # past one 64-key tile: whole tiles (the long-context rounds measured faster so)
    assert [cache_length(n) for n in (65, 128, 144, 193)] == [128, 128, 192, 256]
