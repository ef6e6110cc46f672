"""Refills under continuous batching (issue 38): the async runner reuses the slot of a
request the device has certainly stopped before the host collected its last round
(``AsyncBlockRunner.release_spent_slots``), so the waiting request is prefilled right
after that round in stream order and decodes one round earlier.

What must not move: every request's committed tokens and per-round telemetry (a
request's tokens depend on its own seed and rounds only). What must move: the number of
engine rounds, never up. A negative control frees a slot whose request is still live
and shows that the equality checks below see it.
"""

from __future__ import annotations

import pytest
import torch

from engine_under_test import LLM, SamplingParams
from engine_under_test.runners.block_async import AsyncBlockRunner
from tests.engine.helpers import MODES, PROMPT

# Budgets 2..9 tokens: a request left with one token after its penultimate round drafts
# nothing in its last round, which the host knows a round before it collects it.
N = 12


def workload(n: int = N):
    prompts = [PROMPT[: 4 + i % 9] + [(7 * i + 1) % 50] for i in range(n)]
    params = [
        SamplingParams(temperature=0.0, max_tokens=2 + i % 8, ignore_eos=True)
        if i % 5 == 4
        else SamplingParams(
            temperature=1.0, top_k=20, seed=500 + i, max_tokens=2 + i % 8, ignore_eos=True
        )
        for i in range(n)
    ]
    return prompts, params


def run(model, mode: str, slots: int, *, release=None, n: int = N):
    llm = LLM(model=model, **MODES[mode], max_num_seqs=slots)
    runner = llm.runner
    if release is not None:
        runner.release_spent_slots = release.__get__(runner)
    runner.steps = 0
    step = runner.step

    def counted():
        runner.steps += 1
        step()

    runner.step = counted
    prompts, params = workload(n)
    outs = llm.generate(prompts, params)
    assert outs.report.ok
    return runner, outs


def tokens(outs):
    return [o.token_ids for o in outs]


def stats(outs):
    return [[(r.drafted, r.accepted) for r in o.rounds] for o in outs]


def no_release(self) -> int:
    """The engine before issue 38: a slot is free once the host collected the finish."""
    return 0


def unsafe_release(self) -> int:
    """Negative control: the rule without its budget condition, freeing the slot of any
    request with a round in flight, also those that may still commit. Such a request
    never gets another round: it ends short or never ends."""
    freed = 0
    for s, req in enumerate(self.slots):
        if req is not None and req.inflight > 0:
            self.slots[s] = None
            self._finished_slots.append((s, req.seed is not None))
            freed += 1
    self.flush_finished()
    return freed


@pytest.mark.parametrize("slots", [1, 3])
def test_early_release_leaves_every_request_unchanged_and_saves_rounds(model, slots):
    before_runner, before = run(model, "async", slots, release=no_release)
    runner, after = run(model, "async", slots)
    assert runner.slots_released_early > 0  # the workload exercises the path
    assert tokens(after) == tokens(before)
    assert stats(after) == stats(before)
    # An early release saves the round in which the slot would have idled (slots > 1:
    # its row is dead in a round that runs for the others) or, with one slot, the step
    # in which the pipeline drained (no round submitted while the host collected).
    assert runner.rounds_run <= before_runner.rounds_run
    assert runner.steps < before_runner.steps
    if slots == 1:
        assert runner.rounds_run == before_runner.rounds_run
        assert runner.steps == before_runner.steps - runner.slots_released_early


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_refilled_request_gets_the_tokens_it_gets_alone(model, mode):
    """A request that arrives mid-run (admitted into a reused slot) commits what it
    commits alone, in sync and async (the sync runner never has rounds in flight at
    admission, so it never releases early; it is the reference path)."""
    _, crowd = run(model, mode, 3)
    prompts, params = workload()
    for i in (5, 11):  # admitted after 2 and 8 others: reused slots
        alone = LLM(model=model, **MODES[mode]).generate([prompts[i]], params[i])[0]
        assert crowd[i].token_ids == alone.token_ids
        assert stats([crowd[i]]) == stats([alone])


def test_unsafe_release_is_caught(model):
    """Negative control: reusing the slot of a request that can still commit loses its
    remaining tokens (or leaves it unfinished), and the token comparison sees it."""
    _, before = run(model, "async", 3, release=no_release)
    llm = LLM(model=model, **MODES["async"], max_num_seqs=3)
    llm.runner.release_spent_slots = unsafe_release.__get__(llm.runner)
    prompts, params = workload()
    ids = [llm.add_request(None, p, sp) for p, sp in zip(prompts, params, strict=True)]
    done = {}
    for _ in range(200):  # bounded: a request that lost its slot never finishes
        done.update({o.request_id: o for o in llm.step()})
        if not llm.has_unfinished_requests():
            break
    broken = [done[i].token_ids if i in done else None for i in ids]
    assert broken != tokens(before)


def test_abort_of_a_released_request_leaves_its_slot_to_the_newcomer(model):
    """A request whose slot was released is still in flight: aborting it then finishes
    it without freeing the slot a second time (which would admit two requests into one
    slot), and the newcomer admitted into the slot is unaffected."""
    llm = LLM(model=model, **MODES["async"], max_num_seqs=1)
    a = SamplingParams(temperature=1.0, top_k=20, seed=1, max_tokens=2, ignore_eos=True)
    b = SamplingParams(temperature=1.0, top_k=20, seed=2, max_tokens=6, ignore_eos=True)
    c = SamplingParams(temperature=1.0, top_k=20, seed=3, max_tokens=5, ignore_eos=True)
    for rid, prompt, p in (("a", PROMPT, a), ("b", PROMPT[:5], b), ("c", PROMPT[:7], c)):
        llm.add_request(rid, prompt, p)
    done = {o.request_id: o for o in llm.step()}  # a: prefill + its last round in flight
    runner = llm.runner
    assert runner.release_spent_slots() == 1 and runner.slots == [None]
    llm.abort_request("a")  # still in flight: its slot must not be freed twice
    assert runner._free == [0]
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    done.update({o.request_id: o for o in llm.step()})
    assert done["a"].finish_reason == "abort"
    for rid, prompt, p in (("b", PROMPT[:5], b), ("c", PROMPT[:7], c)):
        alone = LLM(model=model, **MODES["async"]).generate([prompt], p)[0]
        assert done[rid].token_ids == alone.token_ids and done[rid].finish_reason == "length"


def test_release_waits_for_a_waiting_request(model):
    """Nothing is released while no request waits for a slot (the schedule of a run
    without refills is the engine's as before)."""
    runner, _ = run(model, "async", N)
    assert runner.slots_released_early == 0 and runner.steps > 0
    assert isinstance(runner, AsyncBlockRunner)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_early_release_on_cuda_graphs_matches_the_engine_without_it():
    """On CUDA (graph replays, side-stream transfers) the reused slot's admission is
    stream-ordered after the rounds in flight: same tokens as without early release."""
    from engine_under_test import ModelConfig
    from engine_under_test.model import build_model

    gpu_model = build_model(ModelConfig.preset("tiny", seed=0), torch.device("cuda"))
    results = []
    for release in (no_release, None):
        llm = LLM(model=gpu_model, **MODES["async"], max_num_seqs=4, device="cuda")
        llm.runner.capture_at_first_use()
        if release is not None:
            llm.runner.release_spent_slots = release.__get__(llm.runner)
        prompts, params = workload(48)
        llm.generate(prompts, params)  # captures every shape
        outs = llm.generate(prompts, params)
        results.append((tokens(outs), stats(outs), llm.runner.slots_released_early))
    assert results[1][2] > 0
    assert results[0][:2] == results[1][:2]
