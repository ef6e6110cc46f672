"""The planted bugs that act only past the first draft position (runners/deep_mutants.py).

For each: (i) with the same seeds, what it claims to leave alone is identical to the
clean engine (t1 and t2 always; more where the bug allows: the first round, earlier
rounds, untouched rows); (ii) it changes what it claims, where it claims: the laws the
kernel received (``generate(trace=True)``) at positions j >= 1 only, the first differing
token at a bonus / a correction / after a partial accept / in the first round of a
reused slot, or the uniforms repeating across rounds or requests. All checks are
deterministic (fixed seeds, exact equalities or the first differing token), so there is
no α; the counts "> 0" say the seeds used do reach the bug's condition.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine_under_test import LLM, SamplingParams, SpeculativeConfig
from engine_under_test.mutants import list_mutants
from engine_under_test.runners import spec_round
from tests.engine.helpers import (
    MODES,
    PROMPT,
    SPEC,
    deep_mutant_names,
    submit_traced_round,
)
from tests.engine.test_engine_trace import TOL

DEEP = deep_mutant_names()
N = 32


def rand(seed: int, **kw) -> SamplingParams:
    kw = {"temperature": 0.6, "top_p": 0.8, "max_tokens": 12, **kw}
    return SamplingParams(seed=seed, ignore_eos=True, **kw)


def generate(model, mutant, params, mode="sync", prompts=None, spec=SPEC, trace=True, **kw):
    """(llm, outputs) of one traced run; kw go to LLM (max_num_seqs)."""
    llm = LLM(model=model, **{**MODES[mode], "speculative_config": spec}, mutant=mutant, **kw)
    return llm, llm.generate(prompts or [PROMPT] * len(params), params, trace=trace)


def round_starts(out) -> list[int]:
    """Index in token_ids of each decode round's first committed token (t1 is 0)."""
    starts, at = [], 1
    for stat in out.rounds:
        starts.append(at)
        at += stat.accepted + 1
    return starts


def first_diff(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def round_of(out, index: int) -> int:
    """The decode round that committed token_ids[index] (index >= 1)."""
    return max(r for r, s in enumerate(round_starts(out)) if s <= index)


def differing(clean, bugged) -> list[tuple]:
    """(clean output, bugged output, first differing token index, its round) for every
    request the planted bug changed; asserts it changed at least one."""
    found = []
    for a, b in zip(clean, bugged, strict=True):
        i = first_diff(a.token_ids, b.token_ids)
        if i is not None:
            found.append((a, b, i, round_of(a, i)))
    assert found, "the planted bug changed no request"
    return found


def tokens(outs):
    return [o.token_ids for o in outs]


def assert_t1_t2_and_first_position_law_untouched(clean, bugged):
    """t1, t2 and the first round's drafts, q and p at position 0, bit for bit."""
    for a, b in zip(clean, bugged, strict=True):
        assert a.token_ids[:2] == b.token_ids[:2]
        ta, tb = a.trace[0], b.trace[0]
        assert ta.drafts == tb.drafts and np.array_equal(ta.q, tb.q)
        assert np.array_equal(ta.p[0], tb.p[0])


def deep_p_changed(clean, bugged) -> int:
    """Requests whose first-round p differs at some position j >= 1 (same prefix and
    drafts: the first round's inputs are the clean ones)."""
    return sum(
        not np.array_equal(a.trace[0].p[1:], b.trace[0].p[1:])
        for a, b in zip(clean, bugged, strict=True)
    )


def laws_match_serial(llm, out, entry, params) -> bool:
    """Do every p and q row of one round's trace equal the serial law under ``params``?"""
    prefix = PROMPT + out.token_ids[: entry.prefix_len]
    for j in range(len(entry.drafts) + 1):
        ref = llm.target_probabilities(prefix + entry.drafts[:j], params).numpy()
        if np.abs(ref - entry.p[j]).max() >= TOL:
            return False
        if j < len(entry.drafts):
            ref = llm.draft_probabilities(prefix + entry.drafts[:j], params).numpy()
            if np.abs(ref - entry.q[j]).max() >= TOL:
                return False
    return True


# ------------------------------------------------------------------ laws at j >= 1
@pytest.mark.parametrize("name", ["deep_position_temp", "filter_order_temp"])
def test_temperature_bugs_act_at_deep_positions_only_and_only_at_t_not_1(model, name):
    params = [rand(s) for s in range(N)]
    _, clean = generate(model, None, params)
    llm, bugged = generate(model, name, params)
    assert_t1_t2_and_first_position_law_untouched(clean, bugged)
    assert deep_p_changed(clean, bugged) > 0
    assert tokens(clean) != tokens(bugged)
    if name == "deep_position_temp":  # p at j >= 1 is the serial law at temperature 1
        plain = dataclasses.replace(params[0], temperature=1.0)
        first = bugged[0].trace[0]
        prefix = PROMPT + bugged[0].token_ids[:1]
        for j in range(1, len(first.drafts) + 1):
            ref = llm.target_probabilities(prefix + first.drafts[:j], plain).numpy()
            assert np.abs(ref - first.p[j]).max() < TOL
    # Negative controls: at T = 1 (both bugs), and without top-p (the filter order),
    # the bug has nothing to act on.
    controls = [dataclasses.replace(p, temperature=1.0) for p in params[:8]]
    if name == "filter_order_temp":
        controls += [dataclasses.replace(p, top_p=1.0, top_k=8) for p in params[8:16]]
    assert tokens(generate(model, None, controls)[1]) == tokens(generate(model, name, controls)[1])


def test_top_p_drop_crossing_drops_exactly_the_crossing_token_past_position_0(model):
    params = [rand(s) for s in range(N)]
    _, clean = generate(model, None, params)
    _, bugged = generate(model, "top_p_drop_crossing", params)
    assert_t1_t2_and_first_position_law_untouched(clean, bugged)
    dropped = 0
    for a, b in zip(clean, bugged, strict=True):
        for pa, pb in zip(a.trace[0].p[1:], b.trace[0].p[1:], strict=True):
            kept_a, kept_b = np.flatnonzero(pa > 0), np.flatnonzero(pb > 0)
            if len(kept_a) == 1:
                assert np.array_equal(pa, pb)  # a lone survivor is kept
                continue
            # The clean support minus its least probable token (highest index on ties).
            least = kept_a[pa[kept_a] == pa[kept_a].min()].max()
            assert np.array_equal(kept_b, kept_a[kept_a != least])
            dropped += 1
    assert dropped > 0
    assert tokens(clean) != tokens(bugged)
    controls = [dataclasses.replace(p, top_p=1.0, top_k=8) for p in params[:8]]  # no top-p
    assert tokens(generate(model, None, controls)[1]) == tokens(
        generate(model, "top_p_drop_crossing", controls)[1]
    )


def test_bonus_after_accepts_changes_only_bonuses_after_two_or_more_accepts(model):
    # Varied max_tokens: some last rounds draft L = 1, whose bonus must stay right.
    params = [rand(s, temperature=1.0, top_p=1.0, top_k=20, max_tokens=8 + s % 5) for s in range(N)]
    _, clean = generate(model, None, params)
    _, bugged = generate(model, "bonus_after_accepts", params)
    assert any(s.accepted == s.drafted == 1 for o in clean for s in o.rounds)
    assert_t1_t2_and_first_position_law_untouched(clean, bugged)
    for a, _b, i, r in differing(clean, bugged):
        stat = a.rounds[r]
        # The first differing token is the bonus of a round that accepted all L >= 2.
        assert stat.accepted == stat.drafted >= 2 and i == round_starts(a)[r] + stat.accepted
    # The kernel's bonus law: p at L is p at L - 1 in every round with L >= 2, and the
    # right one (a different position's law) in every round with L = 1.
    short = 0
    for out in bugged:
        for entry, stat in zip(out.trace, out.rounds, strict=True):
            L = stat.drafted
            if L >= 2:
                assert np.array_equal(entry.p[L], entry.p[L - 1])
            elif L == 1:
                short += 1
                assert not np.array_equal(entry.p[1], entry.p[0])
    assert short > 0


# ------------------------------------------------------------------ rounds and inputs
def test_late_round_residual_changes_only_corrections_from_the_third_round(model):
    params = [rand(s, max_tokens=20) for s in range(N)]
    _, clean = generate(model, None, params)
    _, bugged = generate(model, "late_round_residual", params)
    for a, _b, i, r in differing(clean, bugged):
        stat = a.rounds[r]
        assert r >= 2, "rounds 0 and 1 are the clean ones"
        assert stat.accepted < stat.drafted and i == round_starts(a)[r] + stat.accepted


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_next_input_partial_acts_after_a_partial_accept_only(model, mode):
    params = [rand(s, max_tokens=16) for s in range(N)]
    _, clean = generate(model, None, params, mode)
    _, bugged = generate(model, "next_input_partial", params, mode)
    assert_t1_t2_and_first_position_law_untouched(clean, bugged)
    for a, b, _i, r in differing(clean, bugged):
        assert r >= 1 and any(0 < s.accepted < s.drafted for s in a.rounds[:r])
        # The request's output before that round is right: only the device input moved,
        # so the round's p at position 0 is a law given the wrong last token.
        assert not np.array_equal(a.trace[r].p[0], b.trace[r].p[0])


# ------------------------------------------------------------------ randomness
def record_uniforms(monkeypatch) -> list:
    """Every round's [B, 2W+1] uniforms as handed to the accept kernel (CPU copies)."""
    seen: list = []
    clean_accept = spec_round.speculative_accept

    def recording(p, q, drafts, draft_lens, uniforms, mutant=None):
        seen.append(uniforms.clone())
        return clean_accept(p, q, drafts, draft_lens, uniforms, mutant=mutant)

    monkeypatch.setattr(spec_round, "speculative_accept", recording)
    return seen


@pytest.mark.parametrize("mutant", [None, "rng_reused_rounds"])
def test_rng_reused_rounds_repeats_the_first_decode_round_block(model, monkeypatch, mutant):
    seen = record_uniforms(monkeypatch)
    generate(model, mutant, [rand(3, max_tokens=40)], trace=False)
    full = [u[0] for u in seen if u.shape[1] == 2 * SPEC.num_speculative_tokens + 1]
    assert len(full) >= 4
    same = [bool((u == full[0]).all()) for u in full[1:4]]
    assert same == ([True] * 3 if mutant else [False] * 3)


def test_rng_reused_rounds_keeps_the_first_round_and_changes_later_ones(model):
    params = [rand(s) for s in range(N)]
    _, clean = generate(model, None, params)
    _, bugged = generate(model, "rng_reused_rounds", params)
    for a, b in zip(clean, bugged, strict=True):
        end = round_starts(a)[1] if len(a.rounds) > 1 else len(a.token_ids)
        assert a.token_ids[:end] == b.token_ids[:end]  # t1 and the whole first round
    assert tokens(clean) != tokens(bugged)


@pytest.mark.parametrize("mutant", [None, "rng_shared_requests"])
def test_rng_shared_requests_share_blocks_from_the_second_round(model, monkeypatch, mutant):
    seen = record_uniforms(monkeypatch)
    _, outs = generate(model, mutant, [rand(5, max_tokens=30), rand(9, max_tokens=30)])
    full = [u for u in seen if u.shape[1] == 2 * SPEC.num_speculative_tokens + 1]
    shared = [bool((u[0] == u[1]).all()) for u in full[:4]]
    assert shared == ([False, True, True, True] if mutant else [False] * 4)
    _, clean = generate(model, None, [rand(5, max_tokens=30), rand(9, max_tokens=30)])
    for a, b in zip(clean, outs, strict=True):
        assert a.token_ids[: round_starts(a)[1]] == b.token_ids[: round_starts(a)[1]]
    if mutant:
        assert tokens(clean) != tokens(outs)


# ------------------------------------------------------------------ batching
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_slot_stale_params_acts_in_the_first_round_of_a_reused_slot(model, mode):
    settings = [dict(temperature=0.4), dict(temperature=1.3, top_p=0.95), dict(top_k=5)]
    params = [rand(s, **settings[s % 3]) for s in range(10)]
    seqs = dict(max_num_seqs=3)
    _, clean = generate(model, None, params, mode, **seqs)
    _, bugged = generate(model, "slot_stale_params", params, mode, **seqs)
    assert tokens(clean)[:3] == tokens(bugged)[:3]  # the first occupants: fresh slots
    changed = 0
    for a, b in zip(clean, bugged, strict=True):
        assert a.token_ids[0] == b.token_ids[0]  # t1 uses the request's own params
        i = first_diff(a.token_ids, b.token_ids)
        if i is not None:
            changed += 1
            assert round_of(a, i) == 0  # later rounds have the right params again
    assert changed > 0
    # The laws the kernel received: every round after the first is the request's own
    # law (the right parameters came back); the first round of a changed request is not.
    # (An unchanged request may have run a stale first round whose tokens agreed.)
    llm = LLM(model=model, **MODES[mode])
    for out, p, a in zip(bugged[3:], params[3:], clean[3:], strict=True):  # reused slots
        for entry in out.trace:
            close = laws_match_serial(llm, out, entry, p)
            if entry.round > 0:
                assert close, "a later round still ran with stale parameters"
            elif a.token_ids != out.token_ids:
                assert not close, "a changed request ran its first round with its own law"
    same = [rand(s) for s in range(10)]  # one setting for all: nothing stale to see
    assert tokens(generate(model, None, same, mode, **seqs)[1]) == tokens(
        generate(model, "slot_stale_params", same, mode, **seqs)[1]
    )


def test_greedy_row_sampled_accepts_greedy_deep_drafts_in_mixed_batches_only(model):
    shallow = SpeculativeConfig(3, "block", 1)  # its argmax often disagrees with p's
    prompts = [PROMPT, PROMPT[:3], [5, 77, 300], [11, 12, 13, 14]]
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    # The random rows outlast the greedy ones, so every greedy round is in a mixed batch.
    params = [greedy] * 4 + [rand(s, max_tokens=48) for s in range(4)]
    kw = dict(prompts=prompts * 2, spec=shallow)
    _, clean = generate(model, None, params, **kw)
    _, bugged = generate(model, "greedy_row_sampled", params, **kw)
    assert tokens(clean)[4:] == tokens(bugged)[4:]  # random rows untouched
    assert_t1_t2_and_first_position_law_untouched(clean, bugged)
    assert tokens(clean)[:4] != tokens(bugged)[:4]
    for out in bugged[:4]:  # once draft 0 passed, every later draft passes unchecked
        assert all(s.accepted in (0, s.drafted) for s in out.rounds)
    assert any(0 < s.accepted < s.drafted for o in clean[:4] for s in o.rounds)
    greedy_only = dict(prompts=prompts, spec=shallow)
    assert tokens(generate(model, None, params[:4], **greedy_only)[1]) == tokens(
        generate(model, "greedy_row_sampled", params[:4], **greedy_only)[1]
    )


# ------------------------------------------------------------------ the async path
def test_deep_mutants_leave_greedy_only_batches_alone(model):
    """Greedy rows keep greedy values under every deep mutant (greedy_row_sampled
    included: it needs a random row in the batch)."""
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    shallow = SpeculativeConfig(3, "block", 1)  # drafts that p's argmax often rejects
    clean = LLM(model=model, speculative_config=shallow).generate([PROMPT], greedy)
    for name in DEEP:
        bugged = LLM(model=model, speculative_config=shallow, mutant=name)
        assert tokens(bugged.generate([PROMPT], greedy)) == tokens(clean), name


def test_deep_mutants_are_registered_and_submit_without_host_reads(model, monkeypatch):
    """Each deep mutant's round (traced, async) is submitted with no host read."""
    assert set(DEEP) <= {m.name for m in list_mutants("engine")}
    for name in DEEP:
        llm = LLM(model=model, speculative_config=SPEC, async_scheduling=True, mutant=name)
        params = [SamplingParams(temperature=0.0, max_tokens=40)]
        params += [rand(s, max_tokens=40) for s in (1, 2)]
        submit_traced_round(llm, params, monkeypatch, f"submitting a round under {name}")
        for s in range(3):
            llm.abort_request(s)
        llm.step()


@pytest.mark.gpu
def test_deep_mutants_under_cuda_graphs():
    """On CUDA (async, graphs on, traced): every deep mutant captures and replays, runs
    every request to max_tokens, and leaves t1, t2 and the first round's position-0 law
    as the clean engine's (same seeds; fresh slots, random rows only)."""
    import torch

    from engine_under_test import ModelConfig
    from engine_under_test.model import build_model

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gpu_model = build_model(ModelConfig.preset("tiny", seed=0), device="cuda")
    params = [rand(s, max_tokens=16) for s in range(8)]

    def run(mutant):
        llm = LLM(
            model=gpu_model,
            speculative_config=SPEC,
            async_scheduling=True,
            device="cuda",
            mutant=mutant,
        )
        outs = llm.generate([PROMPT] * len(params), params, trace=True)
        assert llm.runner.graphs.replays > 0, mutant
        assert [len(o.token_ids) for o in outs] == [16] * len(params), mutant
        return outs

    clean = run(None)
    for name in DEEP:
        assert_t1_t2_and_first_position_law_untouched(clean, run(name))
