"""out_of_support under a numerics model (issue 32, part 1): a committed token of
reference probability 0 whose top-k / top-p / greedy-argmax decision lies inside the
model's error (tokens.csv filter_margin <= 1) is a near-tie, counted apart and bounded;
the same token far from the threshold (a filter bug) still fails, and so does any
zero-probability token when the protocol states no numerics model.

The real-engine case behind it: ci_sequence at offset 715,077,400 on CPU committed token
145 (async_mixed request 28, step 86, T 1.4, top-p 0.9) where the serial reference's
unfiltered mass before it was 0.9000003510, 3.5e-7 past top_p
(docs/evidence/calibration/ci_sequence_real_failing/). Deterministic: fixed laws and
the synthetic sampler's fixed seed, no sampling here."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import pytest

from specconform.calibration.sequence_synthetic import simulate
from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.numerics import model_at
from specconform.kinds.sequence.raw import MECH_COLUMNS, TOKEN_COLUMNS
from specconform.protocol.load import load_protocol
from specconform.results import FAIL, PASS
from specconform.runner.filter_ties import law_margin, token_margin
from specconform.runner.sequence_laws import RequestLaws, support_margins
from tests.toolkit.fixtures.sequence_run import PROTOCOL_PATH

# ci_sequence's model (protocols/ci_sequence.yaml) at T 1: logit bound 3.7e-4, law
# bound 1.8e-4.
BLOCK = {"dtype": "float32", "reduction_length": 128, "kernels": 73, "logit_scale": 32.0}
MODEL = model_at(BLOCK, 1.0)
BOUNDS = {"logit_bound": MODEL.logit_bound, "law_bound": MODEL.law_bound}


def _law(top: float) -> np.ndarray:
    """Token 0 holds ``top``; tokens 1..4 the rest, decreasing."""
    return np.concatenate([[top], np.array([0.5, 0.3, 0.15, 0.05]) * (1 - top)])


# --- the margins (runner/filter_ties.py) ------------------------------------------------


def test_a_token_past_top_p_by_less_than_the_law_bound_is_a_near_tie():
    # Token 1 is dropped by top_p 0.8 when token 0 holds 0.8 + 3.5e-7 (the real case's
    # distance): inside the law bound.
    m = token_margin(_law(0.8 + 3.5e-7), 1, 0, 0.8, **BOUNDS)
    assert m == pytest.approx(3.5e-7 / MODEL.law_bound, rel=1e-3) and m <= 1
    # Negative control: token 0 at 0.85, token 1 dropped 0.05 past top_p (an engine that
    # keeps it has a top-p bug): far outside the error.
    assert token_margin(_law(0.85), 1, 0, 0.8, **BOUNDS) > 100
    # No filter decides a token's support: a zero-probability token is a real one.
    assert token_margin(_law(0.85), 1, 0, 1.0, **BOUNDS) == math.inf


def test_top_k_and_greedy_margins_are_logit_gaps_in_two_logit_bounds():
    z = np.array([3.0, 2.0, 2.0 - 1e-4, 0.5, 0.0])
    u = np.exp(z) / np.exp(z).sum()
    assert token_margin(u, 2, 2, 1.0, **BOUNDS) == pytest.approx(1e-4 / (2 * MODEL.logit_bound))
    assert token_margin(u, 3, 2, 1.0, **BOUNDS) > 100  # rank 4, 1.5 below the 2nd
    # greedy is top-k 1: a second token 1e-4 below the argmax may win on an engine
    z[1] = 3.0 - 1e-4
    u = np.exp(z) / np.exp(z).sum()
    assert token_margin(u, 1, 1, 1.0, **BOUNDS) <= 1
    assert token_margin(u, 3, 1, 1.0, **BOUNDS) > 100


def test_law_margin_sees_a_threshold_anywhere_in_the_law():
    # A top-p threshold a hair from token 0's mass: every kept token's renormalisation
    # can move, so the whole law is near; at 0.7 it is not.
    assert law_margin(_law(0.8 - 5e-5), 0, 0.8, **BOUNDS) <= 1
    assert law_margin(_law(0.7), 0, 0.8, **BOUNDS) > 10
    z = np.array([3.0, 2.0, 2.0 - 1e-4, 0.5, 0.0])
    u = np.exp(z) / np.exp(z).sum()
    assert law_margin(u, 2, 1.0, **BOUNDS) <= 1  # the 2nd and 3rd logits tie
    assert law_margin(u, 3, 1.0, **BOUNDS) > 100  # 3rd vs 4th: a gap of 1.5
    assert law_margin(u, 0, 1.0, **BOUNDS) == math.inf


# --- the runner's column (runner/sequence_laws.py) --------------------------------------


@dataclass(frozen=True)
class _Req:  # the RequestSpec fields support_margins reads
    prompt: tuple = (1,)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.8
    seed: int | None = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _top_p(u: np.ndarray, top_p: float) -> np.ndarray:
    """The reference's filter: keep tokens in decreasing order while the mass before
    them is below top_p, renormalised."""
    order = np.argsort(-u, kind="stable")
    before = np.cumsum(u[order]) - u[order]
    out = np.zeros_like(u)
    keep = order[before < top_p]
    out[keep] = u[keep] / u[keep].sum()
    return out


class _Engine:
    """The reference's laws at every prefix: unfiltered u_p (and u_q), filtered by the
    request's top-p when it has one."""

    def __init__(self, u_p: np.ndarray, u_q: np.ndarray | None = None):
        self.u_p, self.u_q, self.calls = u_p, u_q, []

    def target_law_for(self, prefix, req):
        self.calls.append(("p", len(prefix), req.top_k, req.top_p))
        return _top_p(self.u_p, req.top_p) if req.top_p < 1 else self.u_p

    def draft_law_for(self, prefix, req, depth):
        self.calls.append(("q", len(prefix), req.top_k, req.top_p))
        if self.u_q is None:
            return None
        return _top_p(self.u_q, req.top_p) if req.top_p < 1 else self.u_q


def _laws(engine, req, n: int) -> RequestLaws:
    """The request's filtered reference laws at n steps (what token_rows read), built
    without calling the engine, so that its call log shows only the margins' replays."""
    filt = (lambda u: _top_p(u, req.top_p)) if req.top_p < 1 else (lambda u: u)
    q = None if engine.u_q is None else {t: filt(engine.u_q) for t in range(n)}
    return RequestLaws(np.stack([filt(engine.u_p)] * n), q)


def _row(p_token: float, mech_p: float = math.nan) -> tuple:
    row = [0.0] * (len(TOKEN_COLUMNS) + len(MECH_COLUMNS))
    row[TOKEN_COLUMNS.index("p_token")] = p_token
    row[len(TOKEN_COLUMNS) + MECH_COLUMNS.index("mech_p_token")] = mech_p
    return tuple(row)


def test_support_margins_replay_only_the_zero_probability_tokens_unfiltered():
    engine = _Engine(_law(0.8 + 3.5e-7))
    rows = [_row(0.3), _row(0.0), _row(0.2, mech_p=0.1)]
    out = support_margins(
        engine, _Req(), [4, 1, 3], rows, _laws(engine, _Req(), 3), 2, lambda t: MODEL
    )
    assert math.isnan(out[0]) and math.isnan(out[2])  # in support: not judged
    assert out[1] <= 1  # token 1, 3.5e-7 past top_p
    assert engine.calls == [("p", 2, 0, 1.0)]  # unfiltered, at the token's own prefix
    far_engine = _Engine(_law(0.85))
    far = support_margins(
        far_engine, _Req(), [4, 1], rows[:2], _laws(far_engine, _Req(), 2), 2, lambda t: MODEL
    )
    assert far[1] > 100
    # no numerics block: the column stays empty, nothing replayed
    none = _Engine(_law(0.8))
    margins = support_margins(
        none, _Req(), [4, 1], rows[:2], _laws(none, _Req(), 2), 2, lambda t: None
    )
    assert all(math.isnan(m) for m in margins) and none.calls == []
    # no filter: judged, and never a near-tie
    plain_engine = _Engine(_law(0.8))
    plain_laws = _laws(plain_engine, _Req(top_p=1.0), 2)
    plain = support_margins(
        plain_engine, _Req(top_p=1.0), [4, 1], rows[:2], plain_laws, 2, lambda t: MODEL
    )
    assert plain[1] == math.inf


# p's crossing token 2 sits 1e-7 inside top_p 0.9: an engine may drop it and so scale
# every kept token up by 0.96 / 0.90 (token 1: 0.4167 -> at most 0.4444).
U_P = np.array([0.5, 0.4 - 1e-7, 0.06, 0.04 + 1e-7])


@pytest.mark.parametrize(
    "u_q, explained",
    [
        # q(1) = 0.41 / 0.94 = 0.436 > p(1) = 0.417: a mechanism zero that p's near-tie
        # can reach (0.436 < 0.444)
        (np.array([0.53, 0.41, 0.03, 0.03]), True),
        # negative control: q(1) = 0.49 / 0.94 = 0.521, out of the near-tie's reach
        (np.array([0.45, 0.49, 0.03, 0.03]), False),
    ],
)
def test_a_mechanism_zero_is_a_near_tie_only_where_the_near_ties_reach_it(u_q, explained):
    engine = _Engine(U_P, u_q)
    rows = [_row(0.2, mech_p=0.0)]
    req = _Req(top_p=0.9)
    assert _top_p(U_P, 0.9)[1] < _top_p(u_q, 0.9)[1]  # the reference's residual is 0 at 1
    (margin,) = support_margins(engine, req, [1], rows, _laws(engine, req, 1), 2, lambda t: MODEL)
    assert (margin <= 1) == explained
    if not explained:
        assert margin == math.inf


# --- the evaluator (kinds/sequence/checks.py support_row) -------------------------------


@pytest.fixture(scope="module")
def protocol() -> dict:
    data = copy.deepcopy(load_protocol(PROTOCOL_PATH).data)
    # ci_sequence's model with boundaries cut to 1 (a small limit), and its reserve
    data["numerics"] = {**BLOCK, "growth": "random", "boundaries": 1, "alpha": 0.001}
    data["verdict"] = {"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.005}
    return data


@pytest.fixture(scope="module")
def clean(protocol):
    return simulate(protocol, 1)


def _zero(tokens, n: int, margin: float, group: str = "async_mixed", column="p_token"):
    """The frame with n tokens of a filtered (top-k 20) request set to probability 0
    (``column``), each with ``margin``."""
    tokens = tokens.copy()
    tokens["filter_margin"] = np.nan
    sampled = tokens.index[(tokens["group"] == group) & (tokens["request"] % 8 == 2)]
    if column == "mech_p_token":
        sampled = sampled[tokens.loc[sampled, "kind"].isin(["correction"])]
    at = sampled[:n]
    assert len(at) == n
    tokens.loc[at, column] = 0.0
    tokens.loc[at, "filter_margin"] = margin
    return tokens


def _support(protocol, requests, tokens, checks):
    ev = evaluate_frames(protocol, requests, tokens, checks)
    return ev, next(r for r in ev.tests if r.test == "out_of_support")


def test_a_zero_probability_token_at_a_threshold_is_a_near_tie_and_passes(protocol, clean):
    requests, tokens, checks = clean
    ev, row = _support(protocol, requests, _zero(tokens, 1, 0.0002), checks)
    assert row.status == PASS and row.statistic == 0.0
    assert row.detail.near_ties == 1 and row.detail.near_tie_limit >= 1
    assert row.detail.near_tie_examples[0]["filter_margin"] == 0.0002
    # decisions: tokens of greedy or filtered requests (every group decides here)
    filtered = requests[
        (requests["temperature"] == 0) | (requests["top_k"] > 0) | (requests["top_p"] < 1)
    ]
    assert row.detail.decisions == int(filtered["n_tokens"].sum()) > 0
    assert ev.verdict.verdict == "PASS", ev.verdict.reasons


def test_negative_controls_far_from_the_threshold_or_without_a_model_fail(protocol, clean):
    requests, tokens, checks = clean
    # margin 40: the decision is 40 model errors from flipping (a filter bug)
    ev, row = _support(protocol, requests, _zero(tokens, 1, 40.0), checks)
    assert row.status == FAIL and row.reason == "out of support" and row.detail.near_ties == 0
    assert ev.verdict.verdict == "FAIL"
    # inf: no filter decides the token's support
    _, row = _support(protocol, requests, _zero(tokens, 1, math.inf), checks)
    assert row.status == FAIL
    # no numerics block: a margin excuses nothing
    bare = {k: v for k, v in protocol.items() if k not in ("numerics", "verdict")}
    requests, tokens, checks = simulate(bare, 1)
    _, row = _support(bare, requests, _zero(tokens, 1, 0.0002), checks)
    assert row.status == FAIL and row.detail.near_ties is None


def test_more_near_ties_than_the_model_allows_fail(protocol, clean):
    requests, tokens, checks = clean
    _, row = _support(protocol, requests, _zero(tokens, 1, 0.5), checks)
    limit = row.detail.near_tie_limit
    _, row = _support(protocol, requests, _zero(tokens, limit, 0.5), checks)
    assert row.status == PASS and row.detail.near_ties == limit
    _, row = _support(protocol, requests, _zero(tokens, limit + 1, 0.5), checks)
    assert row.status == FAIL and "more than the numerics model allows" in row.reason


def test_a_mechanism_zero_near_a_threshold_is_a_near_tie_and_far_fails(protocol, clean):
    requests, tokens, checks = clean
    _, row = _support(protocol, requests, _zero(tokens, 1, 0.3, column="mech_p_token"), checks)
    assert row.status == PASS and row.detail.near_ties == 1
    assert row.detail.near_tie_examples[0]["law"] == "mechanism"
    _, row = _support(protocol, requests, _zero(tokens, 1, 7.0, column="mech_p_token"), checks)
    assert row.status == FAIL and row.reason == "mechanism out of support"


def test_a_margin_at_a_token_in_support_is_refused(protocol, clean):
    requests, tokens, checks = clean
    tokens = tokens.copy()
    tokens["filter_margin"] = np.nan
    tokens.loc[tokens.index[0], "filter_margin"] = 0.5  # p_token > 0 there
    with pytest.raises(ValueError, match="filter_margin 0.5 at a token of nonzero probability"):
        evaluate_frames(protocol, requests, tokens, checks)
