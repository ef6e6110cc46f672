"""specconform.stats.mechanism and the runner's mech_* columns, on hand-computed laws.

The case used throughout (V = 4):

    p = [0.5, 0.3, 0.2, 0.0],  q = [0.2, 0.3, 0.1, 0.4]
    p - q = [0.3, 0, 0.1, -0.4]  ->  (p - q)+ = [0.3, 0, 0.1, 0],  TV = 0.4
    r = (p - q)+ / TV = [0.75, 0, 0.25, 0]
    min(p, q) = [0.2, 0.3, 0.1, 0],  1 - TV = 0.6  ->  a = [1/3, 1/2, 1/6, 0]

Deterministic (no α): exact arithmetic on small laws; the one sampled check (the
mixture of the two conditional PITs under the exact rule) states its α below.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from specconform.adapters.engine import TokenEvent
from specconform.adapters.sequence import SequenceRecord
from specconform.runner.sequence_laws import RequestLaws, token_rows
from specconform.stats.mechanism import (
    RESIDUAL_ZERO_RTOL,
    accepted_law,
    mechanism_columns,
    residual_law,
)
from specconform.stats.pit import mean_test, randomized_pit, uniformity

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.2, 0.3, 0.1, 0.4])


def test_the_conditional_laws_by_hand():
    np.testing.assert_allclose(residual_law(P[None], Q[None])[0], [0.75, 0, 0.25, 0])
    np.testing.assert_allclose(accepted_law(P[None], Q[None])[0], [1 / 3, 1 / 2, 1 / 6, 0])
    # Their mixture with weights TV and 1 - TV is p (the committed law is exact).
    mix = 0.4 * residual_law(P[None], Q[None]) + 0.6 * accepted_law(P[None], Q[None])
    np.testing.assert_allclose(mix[0], P)
    # p == q: no residual mass (a rejection is impossible); disjoint laws: no overlap.
    assert not residual_law(P[None], P[None]).any()
    assert not accepted_law(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])).any()


@pytest.mark.parametrize(
    ("token", "corrected", "cdf_below", "p_token"),
    [
        (0, True, 0.0, 0.75),
        (2, True, 0.75, 0.25),
        (0, False, 0.0, 1 / 3),
        (1, False, 1 / 3, 1 / 2),
        (2, False, 5 / 6, 1 / 6),
        # Out of the mechanism's support: a correction where q > p by far more than
        # rounding, an accepted draft where p = 0 (or q = 0): f = 0, fatal.
        (3, True, 0.0, 0.0),
        (3, False, 0.0, 0.0),
    ],
)
def test_mechanism_columns_by_hand(token, corrected, cdf_below, p_token):
    c, f = mechanism_columns(P[None], Q[None], [token], [corrected])
    assert c[0] == pytest.approx(cdf_below, abs=1e-15)
    assert f[0] == pytest.approx(p_token, abs=1e-15)


def test_a_correction_where_p_equals_q_is_a_boundary_case():
    # r(1) = 0 because p(1) == q(1) exactly: rounding decides the sign of p - q there,
    # so the token is neither fatal nor tested: both columns empty.
    c, f = mechanism_columns(P[None], Q[None], [1], [True])
    assert np.isnan(c[0]) and np.isnan(f[0])


def test_the_residual_tolerance_boundary():
    # q - p at token 0 is eps; the rule: fatal iff q(0) - p(0) > RESIDUAL_ZERO_RTOL * q(0).
    def at(eps):
        p = np.array([[0.5, 0.5]])
        q = np.array([[0.5 + eps, 0.5 - eps]])
        return mechanism_columns(p, q, [0], [True])[1][0]

    edge = RESIDUAL_ZERO_RTOL * 0.5 / (1 - RESIDUAL_ZERO_RTOL)  # q - p == rtol * q
    assert np.isnan(at(0.9 * edge))  # within rounding: boundary, not fatal
    assert np.isnan(at(1e-12))
    assert at(1.1 * edge) == 0.0  # beyond it: out of the mechanism's support
    assert at(0.1) == 0.0


def test_the_conditional_pits_of_the_exact_rule_are_uniform():
    # Draws of the exact speculative rule on (P, Q): corrections' PIT under r and
    # accepted drafts' PIT under a, each Pearson χ² on 10 bins at α = 0.01 (a correct
    # rule fails with probability 0.01 each; the seed is fixed). Negative control: the
    # corrections drawn from p instead (residual_from_p) fail: at n ≈ 4,000 corrections
    # its noncentrality is in the thousands (half its draws land on token 0 or 1, where
    # r puts 0.75 and 0), power ≈ 1.
    rng = np.random.default_rng(5)
    n = 10_000
    x = rng.choice(4, size=n, p=Q)
    accepted = rng.random(n) * Q[x] < P[x]
    for law_of_correction, should_pass in ((residual_law(P[None], Q[None])[0], True), (P, False)):
        y = np.where(accepted, x, rng.choice(4, size=n, p=law_of_correction))
        pp, qq = np.repeat(P[None], n, 0), np.repeat(Q[None], n, 0)
        c, f = mechanism_columns(pp, qq, y, ~accepted)
        ok = f > 0  # residual_from_p lands on r's zeros too (fatal, not tested here)
        u = randomized_pit(c[ok], f[ok], rng.random(int(ok.sum())))
        p_corr = uniformity(u[~accepted[ok]], 10).pvalue
        p_acc = uniformity(u[accepted[ok]], 10).pvalue
        assert p_acc >= 0.01
        assert (p_corr >= 0.01) == should_pass, p_corr
    assert sps.binomtest(int(accepted.sum()), n, 0.6).pvalue >= 0.01  # 1 - TV


def _record(tokens, events):
    return SequenceRecord(
        tokens=tuple(tokens),
        finish_reason="length",
        events=tuple(TokenEvent(*e) for e in events),
        rounds=((2, 1),),
    )


def test_token_rows_write_the_mechanism_columns():
    # Round 0 drafts 2 tokens: the first accepted (token 1), the second rejected and
    # corrected to token 2; then a prefill-like target token before them has none.
    rec = _record([0, 1, 2], [(-1, -1, "target"), (0, 0, "accepted"), (0, 1, "correction")])
    laws = RequestLaws(np.stack([P, P, P]).astype(np.float32), {1: Q, 2: Q})
    rows = token_rows("g", 0, rec, laws)
    mech = [(r[11], r[12]) for r in rows]  # after the 11 TOKEN_COLUMNS
    assert np.isnan(mech[0][0]) and np.isnan(mech[0][1])  # target: no mechanism law
    assert mech[1] == pytest.approx((1 / 3, 1 / 2), abs=1e-7)  # accepted 1 under a
    assert mech[2] == pytest.approx((0.75, 0.25), abs=1e-7)  # correction 2 under r
    assert rows[1][10] == pytest.approx(0.4, abs=1e-7)  # tv beside them
    # Without q (an adapter without draft laws) the drafted rows have no mechanism law.
    rows = token_rows("g", 0, rec, RequestLaws(laws.p, None))
    assert all(np.isnan(r[11]) and np.isnan(r[12]) for r in rows)


def test_mean_test_has_its_size_and_sees_a_shift():
    # Size: 2,000 null samples of n = 100 uniforms at alpha = 0.01: the rejection count
    # is Binomial(2000, 0.01) (mean 20; its 99.9 % range is [8, 36]) when the normal tail
    # of the Irwin-Hall sum holds. Power: a shift of the mean by 0.05 at n = 2,000 gives
    # z ~ 6 (power ~1); the coin-reuse bug shifts it by ~0.06 (docs/sequence.md).
    rng = np.random.default_rng(20261201)
    rejected = sum(mean_test(rng.random(100)).pvalue < 0.01 for _ in range(2000))
    assert 8 <= rejected <= 36
    shifted = mean_test(0.1 + 0.9 * rng.random(2000))  # mean 0.55
    assert shifted.z > 5 and shifted.pvalue < 1e-6 and shifted.n == 2000
    low = mean_test(0.9 * rng.random(2000))  # mean 0.45: two-sided
    assert low.z < -5 and low.pvalue < 1e-6
    empty = mean_test([])
    assert empty.n == 0 and np.isnan(empty.pvalue)
