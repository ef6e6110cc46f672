"""Contract 2: request-owned randomness, fixed-seed replay, isolation between requests."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import (
    LLM,
    SamplingParams,
    SpeculativeConfig,
)
from engine_under_test.runners.spec_round import DRAFT_ROUND_OFFSET, draft_uniforms
from engine_under_test.sampling import RngRegistry, philox_uniforms
from tests.engine.helpers import MODES, PROMPT, SPEC


def rand(seed, max_tokens=12, **kw):
    kw.setdefault("temperature", 0.9)
    kw.setdefault("top_k", 20)
    return SamplingParams(seed=seed, max_tokens=max_tokens, ignore_eos=True, **kw)


@pytest.mark.parametrize("mode", list(MODES))
def test_fixed_seed_replay(model, mode):
    params = [rand(s, top_p=0.95) for s in range(40)]
    a = LLM(model=model, **MODES[mode]).generate([PROMPT] * 40, params)
    b = LLM(model=model, **MODES[mode]).generate([PROMPT] * 40, params)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.rounds for o in a] == [o.rounds for o in b]
    assert len({tuple(o.token_ids) for o in a}) > 10  # the seeds do matter


@pytest.mark.parametrize("mode", list(MODES))
def test_adding_or_removing_requests_does_not_change_a_request(model, mode):
    """A request's tokens depend on its own seed only: not on its neighbours, its slot,
    the batch size, or a max_num_seqs that forces continuous batching."""
    target = rand(1234, max_tokens=20)
    alone = LLM(model=model, **MODES[mode]).generate([PROMPT], target)[0].token_ids
    others = [rand(s, max_tokens=5 + s % 7) for s in range(30)]
    prompts = [[3, 4, 5]] * 15 + [PROMPT] + [PROMPT[:7]] * 15
    crowd = LLM(model=model, **MODES[mode], max_num_seqs=8).generate(
        prompts, others[:15] + [target] + others[15:]
    )
    assert crowd[15].token_ids == alone
    greedy_neighbours = [SamplingParams(temperature=0, max_tokens=9)] * 5
    mixed = LLM(model=model, **MODES[mode]).generate(
        [PROMPT] * 6, greedy_neighbours[:3] + [target] + greedy_neighbours[3:]
    )
    assert mixed[3].token_ids == alone


def test_registry_counters_advance_once_per_round(model):
    """A random request draws one block per submitted round (prefill is round 0);
    greedy requests acquire nothing and their counter never moves."""
    llm = LLM(model=model, speculative_config=SPEC)
    runner = llm.runner
    llm.add_request("r", PROMPT, rand(5, max_tokens=30))
    llm.add_request("g", PROMPT, SamplingParams(temperature=0, max_tokens=30))
    rounds = 0
    while True:
        llm.step()
        req_r, req_g = runner.slots[0], runner.slots[1]
        if req_r is None or req_g is None:
            break
        rounds += 1
        assert int(runner.rng.round[0]) == rounds + 1  # round 0 = prefill, then 1, 2..
        assert int(runner.rng.round[1]) == 0
        assert not bool(runner.rng.random_mask[1])
    assert rounds > 2


def test_draft_uniforms_are_a_distinct_domain():
    """Draft-token uniforms come from the request's stream in another counter domain:
    never equal to (or a shifted copy of) the accept block of any round."""
    reg = RngRegistry(7, 4)
    reg.bind(0, 99)
    reg.bind(2, 99)  # same seed in another slot
    random = torch.tensor([True, False, True, False])
    ud = draft_uniforms(reg, 4, 3, random)
    ua = reg.draw(torch.arange(4), random)
    assert torch.equal(ud[0], ud[2]) and torch.equal(ua[0], ua[2])  # slot-independent
    assert torch.all(ud[1] == 0) and torch.all(ua[1] == 0)  # greedy: nothing
    expected = philox_uniforms(torch.tensor([99]), torch.tensor([DRAFT_ROUND_OFFSET]), 3)
    assert torch.equal(ud[0], expected[0])
    blocks = philox_uniforms(torch.full((50,), 99), torch.arange(50), 7)
    assert not torch.isin(ud[0], blocks.flatten()).any()


def test_requests_without_seed_get_a_reported_seed(model):
    llm = LLM(model=model, speculative_config=SpeculativeConfig(2, "block", 1), seed=3)
    outs = llm.generate([PROMPT] * 3, SamplingParams(temperature=1.0, max_tokens=4))
    seeds = [o.seed for o in outs]
    assert all(isinstance(s, int) for s in seeds) and len(set(seeds)) == 3
    again = LLM(model=model, speculative_config=SpeculativeConfig(2, "block", 1)).generate(
        [PROMPT] * 3, [SamplingParams(temperature=1.0, max_tokens=4, seed=s) for s in seeds]
    )
    assert [o.token_ids for o in again] == [o.token_ids for o in outs]
