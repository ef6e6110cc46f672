"""generate(trace=True): the laws each round handed the accept kernel, row by row.

Every traced row must equal the serial replay (``LLM.target_probabilities`` /
``draft_probabilities``: one fresh forward of one prefix, then ``Sampler.probabilities``)
at prompt + tokens[:prefix_len] + drafts[:j]: the same support exactly, and values
within TOL. TOL: the engine's rows come from the batched, KV-cached forward, the serial
ones from a fresh forward of the whole prefix, so float32 matmuls round differently;
measured max |Δ| on the tiny preset is 3.7e-6 for p and 2.8e-6 for q (fp32, CPU), so
2e-5 leaves a margin of 5 and still sees bf16_q (|Δ| up to 1.9e-3 there, and >1e-4
somewhere in every run below). These are deterministic checks (fixed seeds), not
statistical ones: no α.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from engine_under_test import LLM, RoundTrace, SamplingParams
from tests.engine.helpers import MODES, PROMPT, SPEC, submit_traced_round

TOL = 2e-5
BF16_SEEN = 1e-4  # bf16 rounding of q (2^-9 relative) moves q by more than this


def mixed_params(n: int = 6) -> list[SamplingParams]:
    """Random rows with temperature, top-k and top-p, and one greedy row."""
    ps = [
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=s, max_tokens=10, ignore_eos=True)
        for s in range(n - 1)
    ]
    return ps + [SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)]


def max_deviation(llm: LLM, out, params: SamplingParams) -> tuple[float, float]:
    """(max |Δp|, max |Δq|) of one output's trace against the serial replay; asserts the
    trace's bookkeeping and the supports on the way."""
    assert len(out.trace) == len(out.rounds)
    dp = dq = 0.0
    committed = 1  # t1
    for r, (entry, stat) in enumerate(zip(out.trace, out.rounds, strict=True)):
        assert isinstance(entry, RoundTrace)
        assert entry.round == r and entry.prefix_len == committed
        L = stat.drafted
        assert len(entry.drafts) == L
        assert entry.p.shape == (L + 1, llm.model_config.vocab_size) and entry.p.dtype == np.float32
        assert entry.q.shape == (L, llm.model_config.vocab_size) and entry.q.dtype == np.float32
        # The committed tokens are the accepted drafts, then the correction or bonus.
        assert out.token_ids[committed : committed + stat.accepted] == entry.drafts[: stat.accepted]
        prefix = PROMPT + out.token_ids[:committed]
        for j in range(L + 1):
            ref = llm.target_probabilities(prefix + entry.drafts[:j], params).cpu().numpy()
            assert np.array_equal(ref > 0, entry.p[j] > 0), f"p support, round {r}, j={j}"
            dp = max(dp, float(np.abs(ref - entry.p[j]).max()))
        for j in range(L):
            ref = llm.draft_probabilities(prefix + entry.drafts[:j], params).cpu().numpy()
            assert np.array_equal(ref > 0, entry.q[j] > 0), f"q support, round {r}, j={j}"
            dq = max(dq, float(np.abs(ref - entry.q[j]).max()))
        committed += stat.accepted + 1
    return dp, dq


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_trace_rows_equal_the_serial_replay(model, mode):
    llm = LLM(model=model, **MODES[mode])
    params = mixed_params()
    outs = llm.generate([PROMPT] * len(params), params, trace=True)
    for out, p in zip(outs, params, strict=True):
        assert out.rounds, "every request ran decode rounds"
        dp, dq = max_deviation(llm, out, p)
        assert dp < TOL and dq < TOL, (dp, dq)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_trace_changes_no_token_and_no_draw(model, mode):
    """Same seeds, trace on and off: identical outputs (tokens, rounds, finish reasons);
    off leaves ``.trace`` None; a later untraced call is untouched by an earlier one."""
    params = mixed_params()
    llm = LLM(model=model, **MODES[mode])
    off = llm.generate([PROMPT] * len(params), params)
    on = llm.generate([PROMPT] * len(params), params, trace=True)
    again = LLM(model=model, **MODES[mode]).generate([PROMPT] * len(params), params)
    view = lambda outs: [(o.token_ids, o.rounds, o.finish_reason, o.seed) for o in outs]  # noqa: E731
    assert view(on) == view(off) == view(again)
    assert all(o.trace is None for o in off) and all(o.trace for o in on)
    assert not llm.runner.law_trace  # switched off again after the call
    assert all(o.trace is None for o in llm.generate([PROMPT], params[0]))


def test_nospec_trace_is_empty(model):
    outs = LLM(model=model, **MODES["nospec"]).generate([PROMPT] * 2, mixed_params(2), trace=True)
    assert [o.trace for o in outs] == [[], []]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_trace_sees_bf16_q(model, mode):
    """Under bf16_q the kernel's q is the bf16-rounded one: the traced q leaves the
    serial q by more than BF16_SEEN somewhere, while p stays within TOL. The clean run
    above (test_trace_rows_equal_the_serial_replay) is the negative control."""
    llm = LLM(model=model, **MODES[mode], mutant="bf16_q")
    params = mixed_params()[:-1]  # bf16_q acts on random rows only
    outs = llm.generate([PROMPT] * len(params), params, trace=True)
    worst_p = worst_q = 0.0
    for out, p in zip(outs, params, strict=True):
        dp, dq = max_deviation(llm, out, p)
        worst_p, worst_q = max(worst_p, dp), max(worst_q, dq)
    assert worst_p < TOL
    assert worst_q > BF16_SEEN


def test_traced_async_submit_reads_nothing_on_the_host(model, monkeypatch):
    """The traced round and its device copies of the laws are submitted without a
    host read (forbidden tensor-to-host calls raise), like the untraced one."""
    llm = LLM(model=model, speculative_config=SPEC, async_scheduling=True)
    runner = llm.runner
    params = [dataclasses.replace(p, max_tokens=40) for p in mixed_params(3)]
    rows, out, view = submit_traced_round(
        llm, params, monkeypatch, "while submitting a traced round"
    )
    assert view["trace_p"].shape[0] == sum(r is not None for r in rows)
    host = runner.transfer.wait(runner.transfer.submit(view))
    assert host["trace_p"].shape[1:] == (out.trace_p.shape[1], llm.model_config.vocab_size)
    for i in range(len(params)):
        llm.abort_request(i)
    llm.step()


@pytest.mark.gpu
def test_trace_under_cuda_graphs():
    """On CUDA with graphs on: traced rows equal the serial replay (TOL_GPU: the fused
    Triton law is within 1e-6 of the reference; the batched and serial forwards round
    differently, more so on GPU kernels, so 1e-4), trace on/off give the same tokens,
    and the traced rounds really were graph replays."""
    from engine_under_test import ModelConfig
    from engine_under_test.model import build_model

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gpu_model = build_model(ModelConfig.preset("tiny", seed=0), device="cuda")
    params = mixed_params()
    for asynchronous in (False, True):
        llm = LLM(
            model=gpu_model, speculative_config=SPEC, async_scheduling=asynchronous, device="cuda"
        )
        off = llm.generate([PROMPT] * len(params), params)
        replays = llm.runner.graphs.replays
        on = llm.generate([PROMPT] * len(params), params, trace=True)
        assert llm.runner.graphs.replays > replays
        assert [o.token_ids for o in on] == [o.token_ids for o in off]
        for out, p in zip(on, params, strict=True):
            dp, dq = max_deviation(llm, out, p)
            assert dp < 1e-4 and dq < 1e-4, (asynchronous, dp, dq)
