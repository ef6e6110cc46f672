"""Contract 3: numerical errors fail the round through fatal cleanup; failed slots do not
advance; stale rows and positions after the stop point are ignored; the engine keeps
serving afterwards."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import (
    LLM,
    SamplingParams,
)
from engine_under_test.runners.block_async import advance_slots
from engine_under_test.runners.mutant_hooks import MutantHooks
from engine_under_test.runners.spec_round import RoundOutputs
from engine_under_test.runners.state import SlotState
from engine_under_test.sampling import RngRegistry
from tests.engine.helpers import MODES, PROMPT


def rand(seed, max_tokens=20):
    return SamplingParams(
        temperature=1.0, top_k=20, seed=seed, max_tokens=max_tokens, ignore_eos=True
    )


class Fault:
    """Inject `value` into the target logits of `rows` at round number `at` (1-based)."""

    def __init__(self, runner, rows, at, value=float("nan"), every=False):
        self.runner, self.rows, self.at, self.value, self.every = runner, rows, at, value, every
        self.calls = 0
        self.before = None

    def __call__(self, kind, logits):
        name, _ = kind
        if name != "p":
            return logits
        self.calls += 1
        if self.calls == self.at or self.every:
            s = self.runner.state
            self.before = (s.next_token[:3].clone(), s.next_pos[:3].clone())
            logits = logits.clone()
            logits[self.rows] = self.value
        return logits


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_invalid_law_at_live_stop_point_fails_the_round(model, mode, value):
    prompts, params = [PROMPT] * 3, [rand(s) for s in (1, 2, 3)]
    clean = LLM(model=model, **MODES[mode]).generate(prompts, params)

    llm = LLM(model=model, **MODES[mode])
    fault = llm.runner.fault = Fault(llm.runner, rows=[1], at=3, value=value)
    outs = llm.generate(prompts, params)
    assert llm.runner.failed_rounds == 1
    for o, c in zip(outs, clean, strict=True):
        assert o.finish_reason == "error"  # every live row of the round
        assert len(o.rounds) == 2  # rounds 1 and 2 committed
        assert o.token_ids == c.token_ids[: len(o.token_ids)]  # nothing of round 3
        assert len(o.token_ids) == 1 + sum(r.accepted + 1 for r in o.rounds)
    # Failed slots did not advance: device inputs are those the failed round started from.
    state = llm.runner.state
    assert torch.equal(state.next_token[:3], fault.before[0])
    assert torch.equal(state.next_pos[:3], fault.before[1])

    # The engine keeps serving: reused slots, KV rows and generators give fresh results.
    llm.runner.fault = None
    again = llm.generate(prompts + [PROMPT[:5]], params + [rand(9)])
    fresh = LLM(model=model, **MODES[mode]).generate(prompts + [PROMPT[:5]], params + [rand(9)])
    assert [o.token_ids for o in again] == [o.token_ids for o in fresh]
    assert all(o.finish_reason == "length" for o in again)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_positions_after_the_stop_point_are_ignored(model, mode):
    """max_tokens=2: t2 comes from an effective-K=0 round (stop point 0), so NaNs in
    q and in p at positions 1..K are never looked at."""
    params = [rand(s, max_tokens=2) for s in range(8)]
    clean = LLM(model=model, **MODES[mode]).generate([PROMPT] * 8, params)

    def poison(kind, logits):
        if kind[0] == "t1":  # prefill's law stays clean: t1 is not a round's position
            return logits
        logits = logits.clone()
        if kind[0] == "q":
            logits[:] = float("nan")
        else:
            logits[:, 1:] = float("nan")
        return logits

    llm = LLM(model=model, **MODES[mode])
    llm.runner.fault = poison
    outs = llm.generate([PROMPT] * 8, params)
    assert llm.runner.failed_rounds == 0
    assert [o.token_ids for o in outs] == [o.token_ids for o in clean]
    assert all(o.rounds == [o.rounds[0]] and o.rounds[0].drafted == 0 for o in outs)


@pytest.mark.parametrize("mode", list(MODES))
def test_stale_rows_are_ignored(model, mode):
    """A dead row inside the batch (its request finished at prefill) holds NaN logits and
    stale random parameters: its error flag is set, yet the round does not fail."""
    target = rand(77, max_tokens=12)
    alone = LLM(model=model, **MODES[mode]).generate([PROMPT], target)[0]

    llm = LLM(model=model, **MODES[mode])
    runner = llm.runner
    runner.trace = []

    def poison(kind, logits):
        if kind[0] == "t1":  # both requests need a valid t1 (this test is about rounds)
            return logits
        runner.state.temperature[0] = 1.0  # stale garbage in the freed slot
        logits = logits.clone()
        logits[0] = float("nan")
        return logits

    runner.fault = poison
    outs = llm.generate([PROMPT, PROMPT], [rand(5, max_tokens=1), target])
    assert outs[0].token_ids and len(outs[0].token_ids) == 1  # finished at prefill
    assert outs[1].finish_reason == "length"
    assert outs[1].token_ids == alone.token_ids
    assert runner.failed_rounds == 0
    assert any(bool(h["error"][0]) and not bool(h["live"][0]) for _, h in runner.trace)


def test_advance_slots_device_update():
    """The async device update: commits advance live rows; a failed round advances no
    slot and rewinds the random rows' generators; stop tokens and budgets end rows."""
    state = SlotState(4, torch.device("cpu"))
    rng = RngRegistry(7, 4)
    for slot in range(4):
        rng.bind(slot, 10 + slot)
    state.random[:] = True
    state.live[:] = torch.tensor([True, True, True, False])
    state.next_token[:] = torch.tensor([5, 6, 7, 8])
    state.next_pos[:] = torch.tensor([10, 20, 30, 40])
    state.budget[:] = torch.tensor([10, 2, 10, 10])
    state.stop_ids[:, 0] = 99
    rng.draw(torch.arange(4), state.random & state.live)  # the round's draw
    tokens = torch.tensor([[11, 12, -1, -1], [21, 22, -1, -1], [31, 99, 32, -1], [41, -1, -1, -1]])
    out = RoundOutputs(
        tokens,
        torch.tensor([1, 1, 2, 0]),
        torch.tensor([2, 2, 3, 1]),
        torch.zeros(4, dtype=torch.bool),
        torch.zeros(4, dtype=torch.int8),
        torch.tensor([3, 1, 3, 3]),
        torch.tensor([[11, 13, 14], [21, 0, 0], [31, 99, 32], [0, 0, 0]]),
        state.live.clone(),
        torch.tensor([False]),
        state.next_pos.clone(),
        state.next_token.clone(),
    )
    snapshot = [t.clone() for t in (state.next_token, state.next_pos, state.budget)]
    advance_slots(state, rng, out, MutantHooks(None))
    assert state.next_token.tolist() == [12, 22, 32, 8]
    assert state.next_pos.tolist() == [12, 22, 33, 40]
    assert state.budget.tolist() == [8, 0, 7, 10]
    assert state.live.tolist() == [True, False, False, False]  # budget 0; stop id 99
    assert rng.round.tolist() == [1, 1, 1, 0]

    # async_stale_input: the last draft becomes the next input (the planted bug).
    state.next_token[:], state.next_pos[:], state.budget[:] = snapshot
    state.live[:] = out.live
    advance_slots(state, rng, out, MutantHooks("async_stale_input"))
    assert state.next_token.tolist() == [14, 21, 32, 8]

    # A failed round: nothing advances, the random live rows rewind, the rows die.
    state.next_token[:], state.next_pos[:], state.budget[:] = snapshot
    state.live[:] = out.live
    failed = out._replace(failed=torch.tensor([True]))
    advance_slots(state, rng, failed, MutantHooks(None))
    assert state.next_token.tolist() == snapshot[0].tolist()
    assert state.next_pos.tolist() == snapshot[1].tolist()
    assert state.budget.tolist() == snapshot[2].tolist()
    assert state.live.tolist() == [False] * 4
    assert rng.round.tolist() == [0, 0, 0, 0]
