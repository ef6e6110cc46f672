"""Stops wherever they fall in a round (issue 35): nothing committed after a stop, the
stop token committed exactly as the serial reference does, other rows unaffected.

The serial reference of a stop is the same request run without it: randomness is
request-owned and keyed by (seed, round), and draft widths never change a draw
(spec_round), so a request with stop ids S commits exactly its unstopped tokens up to
and including the first token in S. Each case below picks, from an unstopped batch, a
token whose first occurrence sits at one place of a round -- the first, middle or last
draft, the correction or the bonus -- and reruns the whole batch with that token as
the request's only stop id. Deterministic: no sample size, so no α; the negative
control is the planted ``stop_commits_next`` (one token kept after the stop), which
must break the cases where the stop is not the round's last token.
"""

from __future__ import annotations

import pytest

from engine_under_test import LLM, SamplingParams
from tests.engine.helpers import MODES, PROMPT

PLACES = ("first draft", "middle draft", "last draft", "correction", "bonus")
N, MAX = 16, 40


def _params(stops: dict[int, int] | None = None) -> list[SamplingParams]:
    stops = stops or {}
    return [
        SamplingParams(
            temperature=1.0,
            top_k=20,
            seed=100 + i,
            max_tokens=MAX,
            stop_token_ids=[stops[i]] if i in stops else [],
            ignore_eos=True,
        )
        for i in range(N)
    ]


def places(out) -> list[str | None]:
    """The place in its round of every committed token (None: t1, or a K=0 round)."""
    where: list[str | None] = [None]  # t1: the prefill's sample
    for r in out.rounds:
        L, a = r.drafted, r.accepted
        for i in range(a + 1):
            if L == 0:
                where.append(None)
            elif i < a:
                where.append(
                    "first draft" if i == 0 else "last draft" if i == L - 1 else "middle draft"
                )
            else:
                where.append("correction" if a < L else "bonus")
    return where[: len(out.token_ids)]


def pick_cases(base) -> dict[str, tuple[int, int, int]]:
    """place -> (request, step, token): a token whose first occurrence is at that place."""
    cases: dict[str, tuple[int, int, int]] = {}
    for i, out in enumerate(base):
        toks = out.token_ids
        for t, place in enumerate(places(out)):
            if place is not None and place not in cases and toks.index(toks[t]) == t:
                cases[place] = (i, t, toks[t])
    return cases


def run_cases(model, mode: str, mutant: str | None = None) -> dict[str, bool]:
    """place -> whether the stopped batch equals the serial reference (the unstopped
    tokens cut after the stop token, finish 'stop'; every other row unchanged)."""
    base = LLM(model=model, **MODES[mode]).generate([PROMPT] * N, _params())
    cases = pick_cases(base)
    assert set(cases) == set(PLACES), f"{mode}: stops land only at {sorted(cases)}"
    result = {}
    for place, (i, t, token) in cases.items():
        llm = LLM(model=model, **MODES[mode], mutant=mutant)
        outs = llm.generate([PROMPT] * N, _params({i: token}))
        ok = outs[i].token_ids == base[i].token_ids[: t + 1] and outs[i].finish_reason == "stop"
        others = all(
            o.token_ids == b.token_ids and o.finish_reason == "length"
            for j, (o, b) in enumerate(zip(outs, base, strict=True))
            if j != i
        )
        result[place] = ok and others
    return result


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stop_anywhere_in_a_round_commits_the_serial_prefix(model, mode):
    assert run_cases(model, mode) == dict.fromkeys(PLACES, True)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_negative_control_a_token_after_the_stop_is_caught(model, mode):
    got = run_cases(model, mode, mutant="stop_commits_next")
    # A stop anywhere but the round's last committed token leaves a
    # token after it in the same round; the bonus and the correction are always last.
    assert not got["first draft"] and not got["middle draft"], got
    assert got["correction"] and got["bonus"], got


def test_max_tokens_is_never_passed_nor_drafted_past(model):
    """max_tokens is not a cut of a longer run (a row near its budget drafts fewer
    tokens, so its last token is a bonus from p rather than a draft from q: the same
    law, other tokens; the protocols test that law). What holds token for token: exactly
    max_tokens tokens, finish 'length', and no round drafts past the budget."""
    for mode in ("sync", "async"):
        for cut in (1, 2, 5, 11):
            short = [
                SamplingParams(
                    temperature=1.0, top_k=20, seed=100 + i, max_tokens=cut, ignore_eos=True
                )
                for i in range(N)
            ]
            for o in LLM(model=model, **MODES[mode]).generate([PROMPT] * N, short):
                assert len(o.token_ids) == cut and o.finish_reason == "length"
                committed = 1  # t1
                for r in o.rounds:
                    assert r.drafted <= cut - committed - 1, (mode, cut, o.rounds)
                    committed += r.accepted + 1
