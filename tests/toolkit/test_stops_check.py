"""The sequence kind's ``stops`` check (specconform/runner/sequence_stops.py) on
hand-made records: what a correct engine returns passes; each way of ending in the
wrong place is caught. Deterministic (no α); every case that must fail is a negative
control of the passing ones."""

from __future__ import annotations

import pytest

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.runner.sequence_checks import CheckTally
from specconform.runner.sequence_stops import learned_eos, stop_check

STOPS = (143, 65)
EOS = 0


def spec(ignore_eos: bool = False, max_tokens: int = 6) -> RequestSpec:
    return RequestSpec((1, 2), 7, 1.0, 0, 1.0, max_tokens, STOPS, ignore_eos)


def rec(tokens, reason) -> SequenceRecord:
    return SequenceRecord(tuple(tokens), reason)


def check(*items) -> CheckTally:
    tally = CheckTally("stops", None)
    return stop_check(tally, [({"request": i}, s, r) for i, (s, r) in enumerate(items)])


GOOD = [
    (spec(), rec([5, 6, 143], "stop")),  # a stop id, last
    (spec(), rec([5, 65], "stop")),
    (spec(), rec([5, 6, EOS], "stop")),  # EOS, learned from this record
    (spec(), rec([5, 6, 7, 8, 9, 10], "length")),
    (spec(ignore_eos=True), rec([EOS, 6, EOS, 8, 9, 10], "length")),  # EOS ignored
    (spec(), rec([5], "error")),  # not read here (engine_errors is)
]


def test_what_a_correct_engine_returns_passes():
    tally = check(*GOOD)
    assert (tally.checked, tally.mismatches) == (5, 0)
    assert learned_eos([({}, s, r) for s, r in GOOD]) == {EOS}


@pytest.mark.parametrize(
    "bad, problem",
    [
        ((spec(), rec([5, 143, 9], "stop")), "token after a stop"),  # stop_commits_next
        ((spec(), rec([5, 143, 9, 8, 7, 6], "length")), "token after a stop"),  # stop missed
        ((spec(), rec([5, EOS, 6, 7, 8, 9], "length")), "token after a stop"),  # EOS missed
        ((spec(), rec([5, 6, 7], "length")), "length before max_tokens"),
        ((spec(max_tokens=3), rec([5, 6, 143], "length")), "ended on a stop id"),
        ((spec(), rec([5, 6, 9], "stop")), "two EOS tokens"),  # a second "EOS"
        ((spec(ignore_eos=True), rec([5, 6, 9], "stop")), "no stop id"),
    ],
)
def test_each_wrong_ending_is_caught(bad, problem):
    tally = check(*GOOD, bad)
    assert tally.mismatches >= 1
    assert any(problem in e["problem"] for e in tally.examples), tally.examples
