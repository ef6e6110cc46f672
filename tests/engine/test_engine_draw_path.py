"""One way to draw from the target (issue 13): prefill, nospec and the speculative round
all draw through the sampling core (``sample_target`` / ``speculative_accept``) with one
error rule; a NaN law at prefill fails its batch like any other stop point; the planted
fault ``nan_target_once`` fails exactly the first decode round; ``generate`` reports
failed rounds to its caller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine_under_test import LLM, GenerateReport, SamplingParams, SpeculativeConfig
from engine_under_test.runners.mutant_hooks import MutantHooks
from engine_under_test.sampling import categorical, sample_target
from tests.engine.helpers import MODES, PROMPT, SPEC, forbid_host_reads

REFERENCE = Path(__file__).parent / "data" / "draw_path_reference.json"
REF_MODES = {
    **MODES,
    "async_d1": dict(speculative_config=SpeculativeConfig(3, "block", 1), async_scheduling=True),
}


def reference_requests():
    """The requests draw_path_reference.json was recorded with (tiny preset, seed-0
    weights, fp32, CPU, max_num_seqs=8, commit cbf4cb4, before the draw paths were
    merged): random rows with top-k, with top-p, one max_tokens=1 row (t1 only), one
    greedy row; shorter prompts for the last two."""
    params = [
        SamplingParams(temperature=1.0, top_k=20, seed=100 + s, max_tokens=10, ignore_eos=True)
        for s in range(6)
    ]
    params += [
        SamplingParams(temperature=0.7, top_p=0.9, seed=200 + s, max_tokens=9, ignore_eos=True)
        for s in range(3)
    ]
    params += [
        SamplingParams(temperature=1.3, seed=300, max_tokens=1, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
    ]
    return [PROMPT] * 9 + [PROMPT[:5], PROMPT[:7]], params


@pytest.mark.parametrize("mode", list(REF_MODES))
def test_fixed_seed_tokens_identical_to_before_the_merge(model, mode):
    """Same seed, mode and batch plan: the same tokens as the three separate draw paths
    gave (t1 from prefill, nospec steps, bonus/correction draws)."""
    expected = json.loads(REFERENCE.read_text())[mode]
    prompts, params = reference_requests()
    outs = LLM(model=model, **REF_MODES[mode], max_num_seqs=8).generate(prompts, params)
    assert [o.token_ids for o in outs] == expected
    assert outs.report == GenerateReport(outs.report.rounds, ()) and outs.report.rounds > 0


def test_sample_target_is_categorical_on_valid_rows_and_flags_invalid_ones(monkeypatch):
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(64, 50, generator=g) * 3, -1)
    p[::5, 10:] = 0.0  # zero tails
    p[1::5] = torch.where(p[1::5] < 0.02, 0.0, p[1::5])  # holes
    u = torch.rand(64, dtype=torch.float64, generator=g)
    u[0], u[1] = 0.0, 1.0 - 2.0**-53
    with monkeypatch.context() as patch:
        forbid_host_reads(patch, "in sample_target")
        res = sample_target(p, u)
    assert torch.equal(res.tokens[:, 0], categorical(p, u))
    assert not res.error.any() and torch.equal(res.num_committed, torch.ones(64, dtype=torch.int64))

    bad = torch.tensor([[0.5, float("nan")], [0.0, 0.0], [float("inf"), 0.0], [0.2, 0.8]])
    res = sample_target(bad, torch.full((4,), 0.5, dtype=torch.float64))
    assert res.error.tolist() == [True, True, True, False]
    assert res.invalid.tolist() == [1, 2, 1, 0]  # non_finite, zero_mass, valid
    assert res.tokens.tolist() == [[-1], [-1], [-1], [1]]
    assert res.num_committed.tolist() == [0, 0, 0, 1]


def rand(seed, max_tokens=8):
    return SamplingParams(
        temperature=1.0, top_k=20, seed=seed, max_tokens=max_tokens, ignore_eos=True
    )


class PrefillFault:
    """NaN in every row of the `at`-th prefill batch's logits (1-based)."""

    def __init__(self, at):
        self.at, self.calls = at, 0

    def __call__(self, kind, logits):
        if kind[0] != "t1":
            return logits
        self.calls += 1
        return torch.full_like(logits, float("nan")) if self.calls == self.at else logits


@pytest.mark.parametrize("mode", list(MODES))
def test_nan_law_at_prefill_fails_its_batch_and_the_engine_keeps_serving(model, mode):
    """max_num_seqs=2: requests 0 and 1 are prefilled together, request 2 alone once a
    slot frees. A NaN law in the second prefill batch fails request 2 only (it commits
    nothing: no t1); requests 0 and 1 are untouched; the next call serves normally."""
    prompts, params = [PROMPT] * 3, [rand(1, 4), rand(2, 9), rand(3)]
    clean = LLM(model=model, **MODES[mode], max_num_seqs=2).generate(prompts, params)

    llm = LLM(model=model, **MODES[mode], max_num_seqs=2)
    llm.runner.fault = PrefillFault(at=2)
    outs = llm.generate(prompts, params)
    assert [o.finish_reason for o in outs] == ["length", "length", "error"]
    assert [o.token_ids for o in outs[:2]] == [o.token_ids for o in clean[:2]]
    assert outs[2].token_ids == [] and outs[2].rounds == []
    (failed,) = outs.report.failed
    assert (failed.stage, failed.index) == ("prefill", 1)
    assert [(e.request_id, e.round, e.invalid) for e in failed.requests] == [
        (outs[2].request_id, 0, "non_finite")
    ]

    llm.runner.fault = None
    again = llm.generate(prompts, params)
    assert [o.token_ids for o in again] == [o.token_ids for o in clean]
    assert again.report.ok


@pytest.mark.parametrize("mode", list(MODES))
def test_nan_target_once_fails_exactly_the_first_round(model, mode):
    """max_num_seqs=4, 6 requests: the first decode round serves requests 0-3, so all
    four end in "error" (contract 3: one invalid row fails every live row), row 0 (the
    first random row) being the cause; requests 4 and 5, admitted afterwards, equal a
    clean engine's; later calls are clean (the fault fires once per engine)."""
    prompts, params = [PROMPT] * 6, [rand(s, 6 + s) for s in range(6)]
    clean = LLM(model=model, **MODES[mode], max_num_seqs=4).generate(prompts, params)

    llm = LLM(model=model, **MODES[mode], max_num_seqs=4, mutant="nan_target_once")
    outs = llm.generate(prompts, params)
    assert [o.finish_reason for o in outs] == ["error"] * 4 + ["length"] * 2
    assert [o.token_ids for o in outs[:4]] == [c.token_ids[:1] for c in clean[:4]]  # t1 only
    assert [o.token_ids for o in outs[4:]] == [o.token_ids for o in clean[4:]]
    (failed,) = outs.report.failed
    assert (failed.stage, failed.index, outs.report.num_failed_rounds) == ("decode", 0, 1)
    assert [(e.request_id, e.round) for e in failed.requests] == [
        (o.request_id, 1) for o in outs[:4]
    ]
    assert [e.invalid for e in failed.requests] == ["non_finite", None, None, None]
    assert failed.causes == failed.requests[:1]
    assert {e.request_id for e in outs.report.errors} == {o.request_id for o in outs[:4]}

    again = llm.generate(prompts, params)
    assert [o.token_ids for o in again] == [o.token_ids for o in clean]
    assert again.report.ok


def test_nan_target_once_hook_is_device_only(monkeypatch):
    """The hook poisons one row once, without a host read (it runs inside captured
    rounds on CUDA); greedy-only rounds do not use it up."""
    hooks = MutantHooks("nan_target_once")
    logits = torch.randn(4, 3, 7)
    with monkeypatch.context() as patch:
        forbid_host_reads(patch, "in MutantHooks.target_logits")
        greedy = hooks.target_logits(logits, torch.zeros(4, dtype=torch.bool))
        first = hooks.target_logits(logits, torch.tensor([False, True, True, False]))
        second = hooks.target_logits(logits, torch.ones(4, dtype=torch.bool))
    assert torch.equal(greedy, logits) and torch.equal(second, logits)
    assert first[1, 0].isnan().all() and torch.equal(first[1, 1:], logits[1, 1:])
    assert torch.equal(first[[0, 2, 3]], logits[[0, 2, 3]])
    assert hooks.device_state() == [hooks.fired] and bool(hooks.fired)
    assert MutantHooks(None).device_state() == []


def test_generate_report_counts_rounds_per_call(model):
    llm = LLM(model=model, speculative_config=SPEC)
    one = llm.generate([PROMPT], rand(5, max_tokens=1))  # t1 only: no decode round
    assert one.report == GenerateReport(0, ())
    two = llm.generate([PROMPT] * 2, [rand(6), rand(7)])
    assert two.report.rounds == llm.runner.rounds_run and two.report.ok
    assert isinstance(two, list) and len(two) == 2
