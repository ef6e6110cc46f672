"""The batched reference forward (engine_under_test/model/reference.py) against the
one-prefix serial reference, on the prefixes a distribution protocol replays: every
top-k t1 after the prompt and every (t1, t2) pair, at full depth and at each draft depth.

Equal within BATCHED_TOLERANCE (1e-4) with the same support on every prefix -- the
rule specconform's CheckedEngine applies to three prefixes of every batched call -- and
the whole distribution replay through the bundled adapter passes that check (the
reference the ci_gate archive is built from)."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import LLM, SamplingParams
from engine_under_test.model.reference import MAX_ROWS, batched_last_logits
from specconform.adapters.checks import BATCHED_TOLERANCE

PROMPT = [1, 17, 42, 5, 99]


@pytest.fixture(scope="module")
def llm():
    torch.manual_seed(0)
    return LLM("tiny", device="cpu", max_num_seqs=1)


def _prefixes(llm, params):
    p = llm.target_probabilities(PROMPT, params)
    t1s = [int(t) for t in torch.nonzero(p).flatten()]
    pairs = []
    for t1 in t1s[:6]:
        p2 = llm.target_probabilities(PROMPT + [t1], params)
        pairs += [PROMPT + [t1, int(t2)] for t2 in torch.nonzero(p2).flatten()[:20]]
    return [PROMPT + [t] for t in t1s], pairs


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, top_k=20),
        SamplingParams(temperature=2.0, top_k=0, top_p=0.95),
    ],
    ids=["topk20", "t2_topp095"],
)
def test_batched_laws_equal_serial_on_every_prefix(llm, params):
    singles, pairs = _prefixes(llm, params)
    assert len(singles) >= 10 and len(pairs) >= 60
    mixed = singles + pairs  # two lengths in one call: grouped by length, order kept
    for depth in (None, 1, 2):
        batched = llm.reference_probabilities_batch(mixed, params, depth)
        assert batched.shape == (len(mixed), llm.model_config.vocab_size)
        for i, prefix in enumerate(mixed):
            one = (
                llm.target_probabilities(prefix, params)
                if depth is None
                else llm.draft_probabilities(prefix, params, depth)
            )
            diff = float((one - batched[i]).abs().max())
            assert diff <= BATCHED_TOLERANCE, (depth, i, diff)
            assert torch.equal(one > 0, batched[i] > 0), (depth, i)


def test_chunks_beyond_max_rows_keep_their_order(llm):
    params = SamplingParams(temperature=1.0)
    prefixes = [PROMPT + [t % 200] for t in range(MAX_ROWS + 7)]
    logits = batched_last_logits(llm.model, prefixes, llm.model.num_loops)
    for i in (0, MAX_ROWS - 1, MAX_ROWS, MAX_ROWS + 6):
        serial = llm.model.reference_logits(prefixes[i])[-1]
        assert float((serial - logits[i]).abs().max()) < 1e-4
    rows = llm.reference_probabilities_batch(prefixes[:3], params)
    assert torch.allclose(rows.sum(-1), torch.ones(3), atol=1e-5)


def test_bad_input_is_refused(llm):
    with pytest.raises(ValueError, match="exit depth"):
        batched_last_logits(llm.model, [PROMPT], 0)
    with pytest.raises(ValueError, match="at least one token"):
        batched_last_logits(llm.model, [PROMPT, []], 1)
    with pytest.raises(ValueError, match="loops must be"):
        llm.reference_probabilities_batch([PROMPT], SamplingParams(), 99)
