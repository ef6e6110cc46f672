"""Teacher forcing equals the incremental serial replay.

`LLM.teacher_forced_probabilities` gives the laws of every prefix of a generation from
one forward; the sequence runner uses it instead of one forward per prefix once its
``teacher_forcing`` check agrees. Here, for several generations and the sequence grid's
parameters (T 0.6/1.0/1.4 x top-k 0/20 x top-p 1/0.9, and greedy), every row must have
the same support as `target_probabilities` / `draft_probabilities` of that prefix and
max |dp| <= BOUND. Deterministic (no α): the laws are exact functions of the weights.
Measured max |dp| on the tiny preset, CPU float32: docs/sequence-runner.md.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import engine_under_test as eut

# float32 matmuls of a longer sequence may block differently: a few ulps of the largest
# probability (measured <= 6e-6 on CPU; docs/sequence-runner.md), far below any law
# difference a bug makes (bf16 q: ~1e-3).
BOUND = 1e-5
GRID = [
    eut.SamplingParams(temperature=t, top_k=k, top_p=p)
    for t, k, p in itertools.product((0.6, 1.0, 1.4), (0, 20), (1.0, 0.9))
] + [eut.SamplingParams(temperature=0.0)]


def _worst_difference(llm, prompt, tokens, loops) -> float:
    """max |dp| over every prefix and every GRID row; asserts equal supports.

    The incremental side is `target_probabilities` / `draft_probabilities` itself,
    with the prefix's forward computed once and shared by the GRID's parameters (those
    methods are Sampler.probabilities of exactly these logits; the first GRID row is
    checked through the public method too)."""
    from engine_under_test.sampling import Sampler

    worst = 0.0
    forced = {
        i: llm.teacher_forced_probabilities(prompt, tokens, pr, loops) for i, pr in enumerate(GRID)
    }
    depth = llm.model.num_loops if loops is None else loops
    for t in range(len(tokens)):
        prefix = list(prompt) + list(tokens[:t])
        logits = llm.model.reference_logits(prefix, loops=depth)[-1]
        for i, params in enumerate(GRID):
            inc = Sampler.probabilities(logits, params)
            if i == 0:
                public = (
                    llm.target_probabilities(prefix, params)
                    if loops is None
                    else llm.draft_probabilities(prefix, params, loops)
                )
                assert torch.equal(public, inc)
            tf = forced[i][t]
            assert torch.equal(inc > 0, tf > 0), f"support differs at step {t} ({params})"
            worst = max(worst, float((inc - tf).abs().max()))
    return worst


def _generations(device):
    llm = eut.LLM(
        eut.ModelConfig.preset("tiny", seed=0),
        speculative_config=eut.SpeculativeConfig(3, mode="block", draft_loops=2),
        device=device,
    )
    prompts = [list(eut.DEFAULT_PROMPT), [7, 3, 101, 45, 9, 250, 12, 5]]
    params = [
        eut.SamplingParams(temperature=1.0, seed=3, max_tokens=48, ignore_eos=True),
        eut.SamplingParams(temperature=1.4, top_p=0.9, seed=4, max_tokens=48, ignore_eos=True),
    ]
    outs = llm.generate(prompts, params)
    return llm, [(pr, o.token_ids) for pr, o in zip(prompts, outs, strict=True)]


def _check_all(device):
    llm, gens = _generations(device)
    worst = 0.0
    for prompt, tokens in gens:
        for loops in (None, 2):  # p at full depth, q at the draft depth
            worst = max(worst, _worst_difference(llm, prompt, tokens, loops))
    print(f"teacher forcing vs incremental on {device}: max |dp| = {worst:.3g}")
    assert worst <= BOUND, worst
    return worst


def test_teacher_forcing_equals_incremental_cpu():
    _check_all("cpu")


@pytest.mark.gpu
def test_teacher_forcing_equals_incremental_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check_all("cuda")


def test_teacher_forcing_edges():
    llm = eut.LLM(eut.ModelConfig.preset("tiny", seed=0))
    params = eut.SamplingParams(temperature=1.0)
    assert llm.teacher_forced_probabilities([1, 2], [], params).shape == (0, 512)
    with pytest.raises(ValueError, match="prompt"):
        llm.teacher_forced_probabilities([], [1], params)
    with pytest.raises(ValueError, match="loops"):
        llm.teacher_forced_probabilities([1], [1], params, loops=99)
