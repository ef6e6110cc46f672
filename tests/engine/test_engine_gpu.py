"""GPU-only engine tests (``gpu`` marker; skipped without CUDA): two rounds in flight,
CUDA Graph capture/replay, no host synchronisation while a round is submitted, the
layout regression under graphs, and pinned result buffers reused without stale flags."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import (
    LLM,
    ModelConfig,
    SamplingParams,
)
from engine_under_test.model import build_model
from tests.engine.helpers import PROMPT, SPEC

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)


def rand(seed, max_tokens=9):
    return SamplingParams(
        temperature=1.0, top_k=20, seed=seed, max_tokens=max_tokens, ignore_eos=True
    )


@pytest.fixture(scope="module")
def model():
    return build_model(ModelConfig.preset("tiny", seed=0), device="cuda")


def async_llm(model, **kw):
    return LLM(model=model, speculative_config=SPEC, async_scheduling=True, device="cuda", **kw)


def test_greedy_speculation_equals_nospec_on_gpu(model):
    prompts = [PROMPT, PROMPT[:5], [7, 8, 9]]
    base = LLM(model=model, device="cuda").generate(prompts, GREEDY)
    for llm in (
        LLM(model=model, speculative_config=SPEC, device="cuda"),
        async_llm(model),
        async_llm(model, use_cuda_graphs=False),
    ):
        outs = llm.generate(prompts, GREEDY)
        assert [o.token_ids for o in outs] == [o.token_ids for o in base]


def test_two_rounds_in_flight(model):
    """Round n+1 is submitted before the host collects round n; never more than two."""
    llm = async_llm(model)
    runner = llm.runner
    events = []
    submit, collect = runner.submit_round, runner.collect

    def tracked_submit(*a, **k):
        events.append(("submit", len(runner.inflight)))
        return submit(*a, **k)

    def tracked_collect():
        events.append(("collect", len(runner.inflight)))
        return collect()

    runner.submit_round, runner.collect = tracked_submit, tracked_collect
    outs = llm.generate([PROMPT] * 8, [rand(s, max_tokens=40) for s in range(8)])
    assert all(len(o.token_ids) == 40 for o in outs)
    assert events[0] == ("submit", 0) and events[1] == ("submit", 1)
    assert max(n for kind, n in events if kind == "collect") == 2
    assert max(n for kind, n in events if kind == "submit") <= 1
    overlapped = sum(
        1
        for i in range(1, len(events))
        if events[i] == ("collect", 2) and events[i - 1][0] == "submit"
    )
    assert overlapped >= 5


def test_cuda_graph_capture_and_replay(model):
    llm = async_llm(model)
    params = [rand(s, max_tokens=30) for s in range(16)]
    first = llm.generate([PROMPT] * 16, params)
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.captures >= 1
    assert graphs.replays > graphs.captures
    captured = {key: graph for key, (graph, _) in graphs.graphs.items()}
    again = llm.generate([PROMPT] * 16, params)  # replays: no shape captured twice
    assert all(graphs.graphs[key][0] is graph for key, graph in captured.items())
    assert [o.token_ids for o in again] == [o.token_ids for o in first]  # fixed-seed replay
    fresh = async_llm(model).generate([PROMPT] * 16, params)
    assert [o.token_ids for o in fresh] == [o.token_ids for o in first]


def test_no_host_sync_while_submitting_a_round(model):
    llm = async_llm(model)
    runner = llm.runner
    for s in range(4):
        llm.add_request(s, PROMPT, rand(s, max_tokens=200))
    for _ in range(4):  # admit, prefill, capture the graph of this shape
        llm.step()
    B = runner.bucket()
    rows = runner.snapshot(B)
    W = runner.draft_width(rows, runner.K)
    runner.submit_round(B, W)  # capture happens outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = runner.submit_round(B, W)
        ticket = runner.transfer.submit(out.host_view())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    runner.transfer.wait(ticket)
    for s in range(4):
        llm.abort_request(s)
    llm.step()


def test_layout_regression_under_graphs(model):
    llm = async_llm(model)
    outs = llm.generate([PROMPT] * 200, [rand(s) for s in range(200)])
    seed = None
    for s, o in enumerate(outs):
        if o.first_draft_accepted:
            p = llm.target_probabilities(PROMPT + o.token_ids[:1], rand(s))
            if int(p.argmax()) != o.token_ids[1]:
                seed = s
                break
    assert seed is not None, "no accepted non-argmax draft"
    llm = async_llm(model)
    llm.runner.graphs.eager_uses = 0  # a 9-token request: replayed rounds from the first
    llm.runner.trace = []
    out = llm.generate([PROMPT], rand(seed))[0]
    assert llm.runner.graphs.replays > 0
    tokens = out.token_ids
    assert tokens == outs[seed].token_ids
    committed = 1
    for _, h in llm.runner.trace:
        if not h["live"][0]:
            continue
        assert int(h["input_token"][0]) == tokens[committed - 1]
        assert int(h["pos"][0]) == len(PROMPT) + committed - 1
        committed += int(h["num_committed"][0])
    fed = PROMPT + tokens[:-1]
    ref = model.new_cache(1, len(fed))
    model.reference_logits(fed, cache=ref)
    n = len(fed)
    cache = llm.runner.cache
    tol = dict(atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(cache.k[:, :, 0, :, :n], ref.k[:, :, 0, :, :n], **tol)
    torch.testing.assert_close(cache.v[:, :, 0, :, :n], ref.v[:, :, 0, :, :n], **tol)


def test_stale_flags_in_reused_pinned_buffers_are_ignored(model):
    """Poison every pinned result buffer with error/failed flags between rounds: each
    round overwrites its rows, so nothing stale is ever read."""
    params = [rand(s, max_tokens=25) for s in range(6)]
    clean = async_llm(model).generate([PROMPT] * 6, params)
    llm = async_llm(model)
    runner = llm.runner
    submit = runner.transfer.submit

    def poisoning_submit(tensors):
        # The ring slot this submit reuses: its previous round was collected, so it is
        # free; it still holds that round's flags, now all set.
        transfer = runner.transfer
        ring = transfer.ring[transfer.count % len(transfer.ring)]
        for name in ("error", "failed", "live"):
            if name in ring:
                ring[name].fill_(True)
        return submit(tensors)

    runner.transfer.submit = poisoning_submit
    outs = llm.generate([PROMPT] * 6, params)
    assert runner.failed_rounds == 0
    assert [o.token_ids for o in outs] == [o.token_ids for o in clean]


def test_nan_fails_the_round_and_engine_recovers_on_gpu(model):
    llm = async_llm(model)
    calls = {"n": 0}

    def fault(kind, logits):
        if kind[0] == "p":
            calls["n"] += 1
            if calls["n"] == 2:
                logits = logits.clone()
                logits[0] = float("nan")
        return logits

    llm.runner.fault = fault  # eager rounds while a fault hook is set
    outs = llm.generate([PROMPT] * 2, [rand(1, 20), rand(2, 20)])
    assert [o.finish_reason for o in outs] == ["error", "error"]
    llm.runner.fault = None
    again = llm.generate([PROMPT] * 2, [rand(1, 20), rand(2, 20)])
    fresh = async_llm(model).generate([PROMPT] * 2, [rand(1, 20), rand(2, 20)])
    assert [o.token_ids for o in again] == [o.token_ids for o in fresh]


def test_graphs_recaptured_after_the_cache_grows(model):
    """A later, larger batch reallocates the KV cache: the captured graphs (and their
    memory pool) are dropped and recaptured, and results equal a fresh engine's."""
    llm = async_llm(model)
    llm.generate([PROMPT], rand(3, max_tokens=12))
    captures = llm.runner.graphs.captures
    params = [rand(s, max_tokens=20) for s in range(8)]
    grown = llm.generate([PROMPT] * 8, params)
    assert llm.runner.graphs.captures > captures
    fresh = async_llm(model).generate([PROMPT] * 8, params)
    assert [o.token_ids for o in grown] == [o.token_ids for o in fresh]


@pytest.mark.parametrize("spec", [None, SPEC], ids=["nospec", "sync"])
def test_blocking_runners_replay_graphs_like_eager(model, spec):
    """nospec and sync block speculation capture their step too; greedy and fixed-seed
    random rows give the same tokens with and without graphs."""
    prompts = [PROMPT, PROMPT[:5], [7, 8, 9], PROMPT[2:]]
    params = [GREEDY, rand(1, 30), rand(2, 30), GREEDY]
    graphed = LLM(model=model, speculative_config=spec, device="cuda")
    outs = graphed.generate(prompts, params)
    assert graphed.runner.graphs is not None and graphed.runner.graphs.replays > 0
    eager = LLM(model=model, speculative_config=spec, device="cuda", use_cuda_graphs=False)
    assert eager.runner.graphs is None
    assert [o.token_ids for o in outs] == [o.token_ids for o in eager.generate(prompts, params)]


def test_nan_target_once_fires_once_under_graphs(model):
    """The fault's device flag is restored after the capture's warm-up, so the replayed
    first round fails (not the warm-up) and later replays are clean: 4 requests of the
    first round end in "error", the 4 admitted afterwards equal a clean engine's."""
    params = [rand(s) for s in range(8)]
    clean = async_llm(model, max_num_seqs=4).generate([PROMPT] * 8, params)
    llm = async_llm(model, max_num_seqs=4, mutant="nan_target_once")
    outs = llm.generate([PROMPT] * 8, params)
    assert llm.runner.graphs.replays > 0
    assert [o.finish_reason for o in outs] == ["error"] * 4 + ["length"] * 4
    assert outs.report.num_failed_rounds == 1
    assert [o.token_ids for o in outs[4:]] == [o.token_ids for o in clean[4:]]


def test_a_shape_runs_eagerly_before_it_is_captured(model):
    """GraphedRound.eager_uses: a round shape's first two uses run eagerly, the third
    captures (without side-stream warm-ups: the eager uses initialised the shape) and
    later ones replay; the tokens equal an engine without graphs and one that captures
    at first use, after its warm-ups (fixed seeds, random rows)."""
    params = [rand(s, max_tokens=24) for s in range(4)]
    default = async_llm(model)
    outs = default.generate([PROMPT] * 4, params)
    graphs = default.runner.graphs
    assert graphs.eager_calls >= 2 and graphs.captures >= 1 and graphs.replays >= 1
    assert all(graphs.uses[key] == 2 for key in graphs.graphs)  # captured at the third use
    assert graphs.warmup_runs == 0
    first_use = async_llm(model)
    first_use.runner.graphs.eager_uses = 0
    assert [o.token_ids for o in first_use.generate([PROMPT] * 4, params)] == [
        o.token_ids for o in outs
    ]
    assert first_use.runner.graphs.eager_calls == 0
    assert first_use.runner.graphs.warmup_runs == 2 * first_use.runner.graphs.captures > 0
    eager = async_llm(model, use_cuda_graphs=False).generate([PROMPT] * 4, params)
    assert [o.token_ids for o in eager] == [o.token_ids for o in outs]


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("first_use", [True, False])
def test_prefill_graphs_replay_like_eager(model, asynchronous, first_use):
    """Refills of a few slots (2 slots, 8 requests of different prompt lengths and
    budgets) replay captured prefill graphs (runners/prefill.py PrefillForward); the
    tokens equal an engine without graphs, also after the KV cache grew (the last
    requests need longer rows: the prefill graphs are dropped and recaptured). Both
    policies: capture at first use (after side-stream warm-ups) and the default
    eager-first one (captured at the third use, no warm-up)."""
    prompts = [
        PROMPT,
        PROMPT[:5],
        [7, 8, 9],
        PROMPT[:3],
        PROMPT,
        PROMPT[:5],
        PROMPT + PROMPT,
        PROMPT[:4],
    ]
    params = [rand(s, max_tokens=6 + 2 * (s % 3)) for s in range(6)]
    params += [rand(6, max_tokens=200), rand(7, max_tokens=150)]
    kw = dict(speculative_config=SPEC, async_scheduling=asynchronous, device="cuda", max_num_seqs=2)
    graphed = LLM(model=model, **kw)
    if first_use:
        graphed.runner.capture_at_first_use()
    outs = graphed.generate(prompts, params)
    forward = graphed.runner.prefill_forward
    assert forward.graphs.captures >= (2 if first_use else 1) and forward.graphs.replays >= 1
    assert (forward.graphs.warmup_runs > 0) == first_use
    eager = LLM(model=model, use_cuda_graphs=False, **kw).generate(prompts, params)
    assert eager[0].token_ids  # something was generated
    assert [o.token_ids for o in outs] == [o.token_ids for o in eager]


def test_no_host_sync_while_a_refill_prefills(model):
    """A refill's prefill (admission, graph replay of its forward, the t1 draw) never
    synchronises the host: under continuous batching it is queued behind the round in
    flight, which keeps running meanwhile."""
    llm = async_llm(model, max_num_seqs=4)
    runner = llm.runner
    runner.capture_at_first_use()
    for s in range(2):
        llm.add_request(s, PROMPT, rand(s, max_tokens=200))
    for _ in range(3):
        llm.step()  # the prefill of (1 distinct prompt, 16 positions) is captured
    assert runner.prefill_forward.graphs.captures == 1
    replays = runner.prefill_forward.graphs.replays  # a capture also replays once
    llm.add_request(2, PROMPT, rand(2, max_tokens=200))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        admitted = runner.admit()
        out = runner.run_prefill(admitted)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert runner.prefill_forward.graphs.replays == replays + 1
    torch.cuda.synchronize()
    assert out.t1.shape == (1,)
    for s in range(3):
        llm.abort_request(s)
    llm.step()
