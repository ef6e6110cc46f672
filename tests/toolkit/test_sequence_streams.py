"""The ``streams`` check (specconform/runner/sequence_streams.py): no two random draws of
a run share a generator (key, counter, word) -- issue 35's random streams, white-box.

Deterministic (no α). The comparison logic is driven with synthetic draws; end to end
the bundled engine's traced draws pass clean, and the negative controls are the planted
overlapping streams (``rng_draft_overlaps_coins``: draft j reads coin j's counter;
``rng_bonus_overlaps_next_round``: the bonus reads the next round's first coin), plus
the older RNG mutants that share counters across rounds or requests. An engine that
reports no draws makes the check not applicable (NO_EVIDENCE), never a pass.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from specconform.adapters.sequence import RoundTrace, SequenceRecord, StreamDraw
from specconform.kinds.sequence import raw as seq_raw
from specconform.kinds.sequence.checks import check_row
from specconform.kinds.sequence.context import Context
from specconform.results import FAIL, NO_EVIDENCE, PASS
from specconform.runner.sequence_streams import StreamsTally, add_draws, random_picks
from tests.toolkit.test_sequence_run import SMALL, _collect, _write


def _round(r: int, key: int, bonus_round: int | None = None) -> RoundTrace:
    """One round of K = 2 laid out as the bundled engine's (drafts at counter offset
    2**30 in the round's high word; block coins 0-1, corrections 0-1, bonus at counter
    2, word 0); ``bonus_round``: the bonus read from that round's block counter 0."""
    draws = [StreamDraw("draft", j, (key, 0), (0, r, 1 << 30, 7), j) for j in range(2)]
    block = [("coin", 0), ("coin", 1), ("correction", 0), ("correction", 1), ("bonus", 0)]
    for i, (stream, j) in enumerate(block):
        counter, word = (i // 2, r, 0, 7), i % 2
        if stream == "bonus" and bonus_round is not None:
            counter, word = (0, bonus_round, 0, 7), 0
        draws.append(StreamDraw(stream, j, (key, 0), counter, word))
    V = 4
    return RoundTrace(r, r, (), np.full((1, V), 0.25, np.float32), np.zeros((0, V)), tuple(draws))


def _record(rounds) -> SequenceRecord:
    return SequenceRecord((1,) * len(rounds), "length", traces=tuple(rounds))


def test_disjoint_draws_pass_across_rounds_and_requests():
    tally = StreamsTally("streams", None)
    for req, key in ((0, 11), (1, 12)):
        assert add_draws(
            tally, {"group": "g", "request": req}, _record([_round(1, key), _round(2, key)])
        )
    assert tally.checked == 2 * 2 * 7 and tally.mismatches == 0


def test_a_bonus_on_the_next_rounds_coin_is_named_with_both_draws():
    tally = StreamsTally("streams", None)
    rounds = [_round(1, 11, bonus_round=2), _round(2, 11)]
    add_draws(tally, {"group": "g", "request": 3}, _record(rounds))
    assert tally.mismatches == 1
    ex = tally.examples[0]
    assert ex["first"]["stream"] == "bonus" and ex["first"]["round"] == 1
    assert ex["second"]["stream"] == "coin" and ex["second"]["round"] == 2
    assert ex["second"]["index"] == 0 and ex["first"]["counter"] == ex["second"]["counter"]
    assert ex["second"]["request"] == 3


def test_two_requests_on_one_key_overlap():
    tally = StreamsTally("streams", None)
    add_draws(tally, {"group": "g", "request": 0}, _record([_round(1, 5)]))
    add_draws(tally, {"group": "g", "request": 1}, _record([_round(1, 5)]))
    assert tally.mismatches == 7 and tally.examples[0]["first"]["request"] == 0


def test_no_draws_is_reported_and_greedy_requests_are_not_picked():
    no_draws = RoundTrace(0, 0, (), np.zeros((1, 4), np.float32), np.zeros((0, 4)))
    assert not add_draws(StreamsTally("streams", None), {}, _record([no_draws]))
    from specconform.adapters.sequence import RequestSpec

    specs = [
        RequestSpec((1,), None if i % 2 else i, 0.0 if i % 2 else 1.0, 0, 1.0, 4) for i in range(6)
    ]
    assert random_picks(specs, 2) == [0, 4]


# --- end to end on the bundled engine ---------------------------------------------------


def _streams(mutant: str | None, monkeypatch=None) -> dict:
    data = json.loads(json.dumps(SMALL))
    # Two random requests of 12 tokens (several rounds each) beside a greedy one.
    data["groups"] = [dict(data["groups"][0], requests=4, max_tokens=[12], stop_token_ids=[])]
    data["tests"] = [
        {"name": "pit", "type": "pit_uniformity", "role": "primary"},
        {"name": "streams", "type": "streams", "role": "conformance", "sample": 3},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        raw = _collect(_write(Path(tmp), data), mutant=mutant)
    return json.loads(raw[seq_raw.CHECKS])["streams"]


def test_bundled_engine_streams_are_disjoint():
    rec = _streams(None)
    assert rec["applicable"] and rec["checked"] > 3 * 10 and rec["mismatches"] == 0


@pytest.mark.parametrize(
    ("mutant", "streams"),
    [
        ("rng_draft_overlaps_coins", {"draft", "coin"}),
        ("rng_bonus_overlaps_next_round", {"bonus", "coin"}),
        ("rng_reused_rounds", None),
        ("rng_shared_requests", None),
    ],
)
def test_planted_overlaps_fail_naming_the_pair(mutant, streams):
    rec = _streams(mutant)
    assert rec["applicable"] and rec["mismatches"] > 0
    ex = rec["examples"][0]
    assert ex["first"]["counter"] == ex["second"]["counter"]
    if streams is not None:
        assert {ex["first"]["stream"], ex["second"]["stream"]} == streams


def test_an_engine_without_draws_is_not_applicable(monkeypatch):
    from specconform.adapters import bundled

    monkeypatch.setattr(bundled, "_engine_streams", lambda eut: False)
    rec = _streams(None)
    assert not rec["applicable"] and "no random draws" in rec["why"]
    spec = {"name": "streams", "type": "streams", "role": "conformance"}
    ctx = Context.__new__(Context)
    object.__setattr__(ctx, "alpha", 0.01)
    row = check_row(ctx, spec, {"streams": rec})
    assert row.status == NO_EVIDENCE and row.passed is False
    assert "not applicable" in row.reason
    monkeypatch.undo()
    assert check_row(ctx, spec, {"streams": _streams(None)}).status == PASS
    bad = check_row(ctx, spec, {"streams": _streams("rng_bonus_overlaps_next_round")})
    assert bad.status == FAIL and "first mismatch" in bad.reason
