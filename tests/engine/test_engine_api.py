"""The LLM facade: requests, ids, stopping, batching, references, modes, mutants."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import (
    LLM,
    ModelConfig,
    SamplingParams,
    SpeculativeConfig,
)
from engine_under_test.model import build_model
from engine_under_test.mutants import list_mutants
from engine_under_test.sampling import Sampler
from tests.engine.helpers import MODES, PROMPT, SPEC, deep_mutant_names, scope_mutant_names


def rand(seed, **kw):
    kw.setdefault("max_tokens", 10)
    return SamplingParams(temperature=1.0, top_k=20, seed=seed, **kw)


@pytest.mark.parametrize("mode", list(MODES))
def test_add_abort_and_id_reuse(model, mode):
    llm = LLM(model=model, **MODES[mode])
    llm.add_request("a", PROMPT, rand(1, max_tokens=50, ignore_eos=True))
    llm.add_request("b", PROMPT, rand(2, max_tokens=50, ignore_eos=True))
    with pytest.raises(ValueError, match="still running"):
        llm.add_request("a", PROMPT, rand(3))
    llm.step()
    llm.abort_request("a")
    done = {}
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    done.update({o.request_id: o for o in llm.step()})
    assert done["a"].finish_reason == "abort" and done["b"].finish_reason == "length"
    assert len(done["b"].token_ids) == 50
    # "a" is free again; the new request is independent of the aborted one.
    llm.add_request("a", PROMPT, rand(7, max_tokens=6, ignore_eos=True))
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    alone = LLM(model=model, **MODES[mode]).generate(
        [PROMPT], rand(7, max_tokens=6, ignore_eos=True)
    )
    assert done["a"].token_ids == alone[0].token_ids


def test_prompts_out_of_the_vocabulary_are_refused(model):
    llm = LLM(model=model, speculative_config=SPEC)
    V = model.cfg.vocab_size
    for bad in ([], [0, -1, 2], [V], [1, V + 7]):
        with pytest.raises(
            ValueError, match=rf"prompt must be a non-empty list of ids in \[0, {V}\)"
        ):
            llm.add_request(None, bad, rand(1))
    llm.add_request(None, [0, V - 1], rand(1))  # both ends of the range are ids
    assert llm.has_unfinished_requests()


def test_abort_waiting_request(model):
    llm = LLM(model=model, speculative_config=SPEC, max_num_seqs=1)
    llm.add_request(0, PROMPT, rand(1))
    llm.add_request(1, PROMPT, rand(2))
    llm.abort_request(1)  # still waiting
    outs = {o.request_id: o for o in llm.step()}
    assert outs[1].finish_reason == "abort" and outs[1].token_ids == []


@pytest.mark.parametrize("mode", list(MODES))
def test_stop_tokens_and_max_tokens(model, mode):
    base = (
        LLM(model=model, **MODES[mode])
        .generate([PROMPT], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0]
        .token_ids
    )
    stop = base[6]
    first = base.index(stop)
    llm = LLM(model=model, **MODES[mode])
    out = llm.generate(
        [PROMPT],
        SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop_token_ids=[stop]),
    )[0]
    assert out.finish_reason == "stop" and out.token_ids == base[: first + 1]
    # EOS is the model's eos_token_id unless ignore_eos.
    eos_model = build_model(ModelConfig.preset("tiny", seed=0, eos_token_id=stop))
    out = LLM(model=eos_model, **MODES[mode]).generate(
        [PROMPT], SamplingParams(temperature=0, max_tokens=30)
    )[0]
    assert out.finish_reason == "stop" and out.token_ids == base[: first + 1]
    out = LLM(model=model, **MODES[mode]).generate(
        [PROMPT], SamplingParams(temperature=0, max_tokens=7, ignore_eos=True)
    )[0]
    assert out.finish_reason == "length" and out.token_ids == base[:7]


def test_effective_k0_round_and_first_draft_flag(model):
    llm = LLM(model=model, speculative_config=SPEC)
    outs = llm.generate([PROMPT] * 20, [rand(s, max_tokens=3, ignore_eos=True) for s in range(20)])
    for o in outs:
        assert len(o.token_ids) == 3
        assert o.rounds[0].drafted == 1  # budget 2 after t1: L = 1
        assert o.first_draft_accepted == (o.rounds[0].accepted == 1)
        if not o.first_draft_accepted:  # t3 from an L = 0 round
            assert o.rounds[1] == type(o.rounds[1])(0, 0)
    assert {o.first_draft_accepted for o in outs} == {True, False}
    one = llm.generate([PROMPT], rand(1, max_tokens=1))[0]
    assert len(one.token_ids) == 1 and one.rounds == [] and one.first_draft_accepted is None


@pytest.mark.parametrize("mode", list(MODES))
def test_continuous_batching_and_progress(model, mode):
    params = [rand(s, max_tokens=4 + s % 9, ignore_eos=True) for s in range(25)]
    prompts = [PROMPT[: 3 + s % 9] for s in range(25)]
    seen = []
    small = LLM(model=model, **MODES[mode], max_num_seqs=4).generate(
        prompts, params, progress=lambda done, total: seen.append((done, total))
    )
    big = LLM(model=model, **MODES[mode]).generate(prompts, params)
    assert [o.token_ids for o in small] == [o.token_ids for o in big]
    assert [len(o.token_ids) for o in small] == [p.max_tokens for p in params]
    assert seen[-1] == (25, 25) and all(t == 25 for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_reference_probabilities(model):
    llm = LLM(model=model, speculative_config=SPEC)
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
    p = llm.target_probabilities(PROMPT, params)
    q = llm.draft_probabilities(PROMPT, params)
    assert p.shape == q.shape == (512,) and p.dtype == torch.float32
    assert abs(p.sum().item() - 1) < 1e-5 and (p > 0).sum() <= 20
    torch.testing.assert_close(p, Sampler.probabilities(model.reference_logits(PROMPT)[-1], params))
    torch.testing.assert_close(
        q, Sampler.probabilities(model.reference_logits(PROMPT, 2)[-1], params)
    )
    torch.testing.assert_close(llm.draft_probabilities(PROMPT, params, 4), p)
    assert not torch.equal(llm.draft_probabilities(PROMPT, params, 1), q)


def test_unsupported_combinations_reject_random_sampling(model):
    pipe = LLM(model=model, speculative_config=SpeculativeConfig(3, "pipeline", 2))
    with pytest.raises(ValueError, match="pipeline"):
        pipe.generate([PROMPT], rand(1))
    with pytest.raises(ValueError, match="pipeline"):
        pipe.add_request(None, PROMPT, SamplingParams(temperature=0.5, seed=1))
    assert pipe.generate([PROMPT], SamplingParams(temperature=0, max_tokens=5))[0].token_ids
    async_nospec = LLM(model=model, async_scheduling=True)
    with pytest.raises(ValueError, match="async_scheduling"):
        async_nospec.generate([PROMPT], rand(1))
    with pytest.raises(ValueError, match="draft_loops"):
        LLM(model=model, speculative_config=SpeculativeConfig(3, "block", 4))
    with pytest.raises(ValueError):
        SpeculativeConfig(3, "tree", 2)
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(model=model, max_model_len=32).generate([PROMPT], rand(1, max_tokens=30))
    with pytest.raises(ValueError, match="prompt"):
        LLM(model=model).generate([[600]], rand(1))


def test_mutants_are_off_by_default_and_validated(model):
    assert LLM(model=model).mutant is None
    with pytest.raises(ValueError, match="unknown mutant"):
        LLM(model=model, mutant="not_a_bug")
    for m in list_mutants():
        if m.layer == "tree":  # specconform's reference tree sampler's, refused here
            with pytest.raises(ValueError, match="not the engine's"):
                LLM(model=model, speculative_config=SPEC, mutant=m.name)
            continue
        LLM(model=model, speculative_config=SPEC, mutant=m.name)  # every name is selectable


# The mutants that act only past the first draft position need their own conditions
# (reused slots, mixed batches, later rounds) and are checked where they act, with
# sharper assertions, in test_mutants_deep.py.
DEEP_MUTANTS = set(deep_mutant_names()) | set(scope_mutant_names())  # and issue 35's
ENGINE_MUTANTS = [m.name for m in list_mutants("engine") if m.name not in DEEP_MUTANTS]


@pytest.mark.parametrize("name", ENGINE_MUTANTS)
def test_each_engine_mutant_changes_the_run(model, name):
    """Every engine mutant changes committed tokens for some seeds (no_draft_probs keeps
    the law exact but lowers acceptance). The law checks are specconform's protocols."""
    params = [
        SamplingParams(temperature=0.7, top_k=8, top_p=0.9, seed=s, max_tokens=8, ignore_eos=True)
        for s in range(120)
    ]
    asynchronous = name == "async_stale_input"
    clean = LLM(model=model, speculative_config=SPEC, async_scheduling=asynchronous)
    bugged = LLM(model=model, speculative_config=SPEC, async_scheduling=asynchronous, mutant=name)
    a = clean.generate([PROMPT] * 120, params)
    b = bugged.generate([PROMPT] * 120, params)
    changed = sum(x.token_ids != y.token_ids for x, y in zip(a, b, strict=True))
    if name == "bf16_q":
        # bf16 rounding of q moves the accept ratio by ~2^-9: rarely visible in 120 seeds,
        # so check the q handed to the verifier instead.
        q = torch.softmax(torch.randn(2, 3, 512) * 4, -1)
        drafts = torch.zeros(2, 3, dtype=torch.int64)
        got = bugged.hooks.q_for_accept(q.clone(), drafts, None, torch.tensor([True, False]))
        assert not torch.equal(got[0], q[0]) and torch.equal(got[1], q[1])
        assert torch.equal(got[0], q[0].to(torch.bfloat16).float())
    else:
        assert changed > 0
    if name == "no_draft_probs":
        rate = lambda outs: sum(o.num_accepted for o in outs) / sum(o.num_drafted for o in outs)  # noqa: E731
        assert rate(b) < rate(a) - 0.1
    greedy = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    assert (
        bugged.generate([PROMPT], greedy)[0].token_ids
        == clean.generate([PROMPT], greedy)[0].token_ids
    )  # greedy rows untouched


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_every_mutant_runs_ragged_and_k0_rounds(model, asynchronous):
    """Every mutant survives rounds of every width, effective K = 0 included."""
    params = [
        SamplingParams(temperature=0.8, top_k=10, top_p=0.9, seed=s, max_tokens=2 + s % 5)
        for s in range(10)
    ]
    for m in list_mutants():
        if m.layer == "tree":  # not the engine's (test_mutants_are_off_by_default_...)
            continue
        llm = LLM(
            model=model, speculative_config=SPEC, async_scheduling=asynchronous, mutant=m.name
        )
        outs = llm.generate([PROMPT] * 10, params)
        if m.fault:  # all ten are in the first decode round, which fails: t1 only
            assert outs.report.num_failed_rounds == 1, m.name
            assert all(o.finish_reason == "error" and len(o.token_ids) == 1 for o in outs)
            continue
        assert [len(o.token_ids) for o in outs] == [p.max_tokens for p in params], m.name


@pytest.mark.parametrize("mode", list(MODES))
def test_close_frees_the_cache_and_the_engine_serves_again(model, mode):
    params = [rand(s, max_tokens=8, ignore_eos=True) for s in range(3)]
    llm = LLM(model=model, **MODES[mode])
    first = llm.generate([PROMPT] * 3, params)
    assert llm.runner.cache is not None
    assert llm.runner.prefill_forward.cache is llm.runner.cache
    llm.close()
    # Nothing holds the cache any more (the prefill forward kept a reference to it).
    assert llm.runner.cache is None and llm.runner.prefill_forward.cache is None
    again = llm.generate([PROMPT] * 3, params)  # reallocates; same fixed-seed tokens
    assert [o.token_ids for o in again] == [o.token_ids for o in first]


def test_close_refuses_while_requests_are_running(model):
    llm = LLM(model=model, **MODES["async"])
    llm.add_request("a", PROMPT, rand(1, max_tokens=20, ignore_eos=True))
    llm.step()
    with pytest.raises(RuntimeError, match="unfinished requests"):
        llm.close()
    llm.abort_request("a")  # its last round may still be in flight: close collects it
    while llm.has_unfinished_requests():
        llm.step()
    llm.close()
    assert llm.runner.cache is None and not llm.runner.has_work()


def test_slots_finished_in_one_round_are_cleared_together(model):
    """Requests finishing in the same commit pass free their slots in one batched
    clear; a later admission reuses them with fresh device state."""
    llm = LLM(model=model, **MODES["sync"])
    llm.generate([PROMPT] * 4, [rand(s, max_tokens=3, ignore_eos=True) for s in range(4)])
    runner = llm.runner
    assert runner._finished_slots == [] and sorted(runner._free)[:4] == [0, 1, 2, 3]
    assert not runner.state.live[:4].any() and not runner.rng.random_mask[:4].any()
    greedy = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    out = llm.generate([PROMPT], greedy)[0]
    assert out.token_ids == LLM(model=model).generate([PROMPT], greedy)[0].token_ids


@pytest.mark.parametrize("mode", list(MODES))
def test_repeated_prompts_prefill_once_and_equal_single_requests(model, mode):
    """Identical prompts in one prefill batch run one forward (runners/prefill.py); each
    request's tokens equal those of the request alone, and a copied slot's keys and
    values equal its representative's (and differ from another prompt's)."""
    other = PROMPT[:5]
    prompts = [PROMPT, other, PROMPT, PROMPT, other, [7, 8, 9]]
    params = [rand(s, max_tokens=12, ignore_eos=True) for s in range(len(prompts))]
    batched = LLM(model=model, **MODES[mode]).generate(prompts, params)
    for prompt, p, out in zip(prompts, params, batched, strict=True):
        alone = LLM(model=model, **MODES[mode]).generate([prompt], p)[0]
        assert out.token_ids == alone.token_ids
    # The cache of a copied slot equals its representative's at every depth and layer.
    llm = LLM(model=model, **MODES[mode])
    for i, prompt in enumerate(prompts):
        llm.add_request(str(i), prompt, rand(i, max_tokens=1, ignore_eos=True))
    llm.step()
    cache, n = llm.runner.cache, len(PROMPT)
    assert cache is not None
    for a, b in [(0, 2), (0, 3)]:
        assert torch.equal(cache.k[:, :, a, :, :n], cache.k[:, :, b, :, :n])
        assert torch.equal(cache.v[:, :, a, :, :n], cache.v[:, :, b, :, :n])
    assert not torch.equal(cache.k[:, :, 0, :, :5], cache.k[:, :, 5, :, :5])  # [7, 8, 9]


@pytest.mark.parametrize("mode", list(MODES))
def test_padded_prefill_gives_the_unpadded_tokens(model, mode):
    """CUDA pads a prefill batch's prompt axis to a multiple of PrefillForward.PAD_T (so
    that refills share a few graph shapes). The padding's keys must never be seen: on
    CPU, forced on, the padded prefill gives the same first logits (up to float32
    summation order: GEMMs of other row counts) and the same tokens as the unpadded
    one, with refills of different prompt lengths (2 slots, 6 requests)."""
    prompts = [PROMPT, PROMPT[:5], [7, 8, 9], PROMPT + PROMPT[:9], PROMPT[:2], PROMPT]
    params = [rand(s, max_tokens=4 + 3 * s, ignore_eos=True) for s in range(len(prompts))]
    plain = LLM(model=model, max_num_seqs=2, **MODES[mode])
    padded = LLM(model=model, max_num_seqs=2, **MODES[mode])
    padded.runner.prefill_forward.pad = True
    assert plain.runner.prefill_forward.pad is False  # CPU: unpadded unless forced
    want = plain.generate(prompts, params)
    got = padded.generate(prompts, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    forward, cache = padded.runner.prefill_forward, padded.runner.cache
    slots = [0, 1]
    a = forward(cache, [PROMPT[:5], [7, 8, 9]], slots, padded.runner.state.upload)
    b = plain.runner.prefill_forward(
        plain.runner.cache, [PROMPT[:5], [7, 8, 9]], slots, plain.runner.state.upload
    )
    assert a.shape == b.shape == (2, model.cfg.vocab_size)
    assert torch.allclose(a, b, rtol=0, atol=1e-5)
    # Negative control: padding that the causal mask did not hide (here: the pad id
    # placed before the prompt) would change the logits.
    shifted = forward(
        cache,
        [[0] * 11 + PROMPT[:5], [0] * 13 + [7, 8, 9]],
        slots,
        padded.runner.state.upload,
    )
    assert not torch.allclose(shifted, b, rtol=0, atol=1e-3)
