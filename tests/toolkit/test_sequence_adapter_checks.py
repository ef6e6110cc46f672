"""CheckedEngine validates every answer of the optional sequence methods: a broken
adapter is one AdapterError line (exit 2), never data (specconform/adapters/sequence_checks.py).
Deterministic; no statistics."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specconform.adapters.checks import CheckedEngine
from specconform.adapters.engine import AdapterError, TokenEvent
from specconform.adapters.sequence import RequestSpec, RoundTrace, SequenceRecord

V = 8
SPEC = SimpleNamespace(num_speculative_tokens=3, max_tokens=16)
GROUP = SimpleNamespace(name="g", mode="async", draft_loops=1)
REQ = RequestSpec((1, 2), 0, 1.0, 0, 1.0, 4)


def _good_record():
    # t1 (target), then round 0: one accepted draft and a correction.
    events = (TokenEvent(-1, -1, "target"), TokenEvent(0, 0, "accepted"))
    events += (TokenEvent(0, 1, "correction"),)
    trace = RoundTrace(0, 1, (3, 4), np.full((3, V), 1 / V, np.float32), np.full((2, V), 1 / V))
    return SequenceRecord((5, 3, 6), "length", events, ((2, 1),), (trace,))


class Fake:
    prompt = [1, 2]
    vocab_size = V

    def __init__(self, **answers):
        self.answers = answers
        self.caps = answers.pop("caps", {})

    def describe(self):
        return {"name": "fake", "version": "1", "capabilities": self.caps}

    def run_group(self, group, seeds, progress=None):
        return []

    def target_law(self, prefix):
        return np.full(V, 1 / V)

    def run_requests(self, group, requests, max_num_seqs, trace=False, progress=None):
        return self.answers.get("records", [_good_record() for _ in requests])

    def target_law_for(self, prefix, request):
        return self.answers.get("law", np.full(V, 1 / V))

    def sequence_laws(self, request, tokens, depth):
        return self.answers.get("laws", (np.full((len(tokens), V), 1 / V),) * 2)

    def target_logits(self, prefix):
        return self.answers.get("logits", np.zeros(V, np.float32))


def _checked(**answers):
    return CheckedEngine(Fake(**answers), "fake", SPEC)


def test_good_answers_pass_and_capabilities_follow_the_methods():
    engine = _checked()
    caps = engine.info.capabilities
    assert caps.sequence and caps.sequence_laws and caps.logits and not caps.trace
    (rec,) = engine.run_requests(GROUP, [REQ], None)
    assert rec.tokens == (5, 3, 6)
    p, q = engine.sequence_laws(REQ, [5, 3], 1)
    assert p.shape == q.shape == (2, V)
    assert engine.target_logits([1]).shape == (V,)


def _block_with(row: int, value: float, fill: float = 1 / V) -> np.ndarray:
    block = np.full((2, V), 1 / V)
    block[row, :] = fill
    block[row, 3] = value
    return block


def _negative_block() -> np.ndarray:
    block = np.full((2, V), 1 / V)
    block[1, 2], block[1, 5] = -0.25, 1 / V + 0.25
    return block


def _bad_trace():
    rec = _good_record()
    wrong = RoundTrace(0, 1, (3, 4), np.full((3, V), 1 / V, np.float32), np.zeros((3, V)))
    return SequenceRecord(rec.tokens, rec.finish_reason, rec.events, rec.rounds, (wrong,))


@pytest.mark.parametrize(
    ("answers", "call", "message"),
    [
        ({"records": []}, "run", "returned 0 records for 1 requests"),
        (
            {"records": [SequenceRecord((5, 99), "length", None, None)]},
            "run",
            "token 99 outside",
        ),
        ({"records": [SequenceRecord((5,), "done")]}, "run", "finish_reason 'done'"),
        (
            {"records": [SequenceRecord((5, 1, 1, 1, 1), "length")]},
            "run",
            "5 tokens, expected 1..4",
        ),
        ({"records": [_bad_trace()]}, "run", "q has shape (3, 8), expected (2, 8)"),
        (
            {"records": [SequenceRecord((5, 3), "length", None, ((4, 1),))]},
            "run",
            "breaks 0 <= accepted <= drafted <= K=3",
        ),
        ({"laws": (np.full((2, V), 0.2), None)}, "laws", "not 1"),
        ({"laws": (np.full((3, V), 1 / V), None)}, "laws", "expected (2, 8)"),
        # One bad entry in a block: NaN, inf, a negative entry (whose row still sums to
        # 1), and float64 entries finite one by one whose row sum overflows.
        ({"laws": (_block_with(1, np.nan), None)}, "laws", "negative or non-finite"),
        ({"laws": (_block_with(0, np.inf), None)}, "laws", "negative or non-finite"),
        ({"laws": (_negative_block(), None)}, "laws", "negative or non-finite"),
        ({"laws": (_block_with(1, 1e308, fill=1e308), None)}, "laws", "not 1"),
        ({"law": np.full(V, 0.5)}, "law", "sums to 4"),
        ({"logits": np.full(V, np.nan, np.float32)}, "logits", "NaN"),
    ],
)
def test_broken_answers_are_one_adapter_error(answers, call, message):
    engine = _checked(**answers)
    with pytest.raises(AdapterError) as err:
        if call == "run":
            engine.run_requests(GROUP, [REQ], None)
        elif call == "laws":
            engine.sequence_laws(REQ, [5, 3], None)
        elif call == "law":
            engine.target_law_for([1, 2], REQ)
        else:
            engine.target_logits([1])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_claimed_capability_without_its_method_is_refused():
    class NoRun(Fake):
        run_requests = None  # type: ignore[assignment]

    with pytest.raises(AdapterError, match="capabilities say trace but there is no run_requests"):
        CheckedEngine(NoRun(caps={"trace": True}), "fake", SPEC)
    assert not CheckedEngine(NoRun(), "fake", SPEC).info.capabilities.sequence
