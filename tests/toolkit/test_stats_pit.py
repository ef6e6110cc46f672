"""specconform.stats.pit: the randomized PIT and its tests, on exact small laws.

Every threshold below is at α = 0.01 unless stated; the power of each negative control
is stated from its noncentrality (seeds fixed: the outcomes are deterministic)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from specconform.stats.pit import (
    acceptance_counts,
    bin_of,
    pair_correlation,
    pair_independence,
    randomized_pit,
    uniformity,
)

ALPHA = 0.01


def _sample(law: np.ndarray, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(cdf_below, p_token) of n tokens drawn from ``law`` ([V])."""
    x = rng.choice(law.size, size=n, p=law)
    cdf = np.concatenate([[0.0], np.cumsum(law)[:-1]])
    return cdf[x], law[x]


def test_pit_of_tokens_from_their_law_is_uniform():
    # A peaked discrete law: U is exactly Uniform(0, 1) only thanks to V.
    rng = np.random.default_rng(0)
    law = np.array([0.6, 0.25, 0.1, 0.05])
    cdf, p = _sample(law, 20_000, rng)
    u = randomized_pit(cdf, p, rng.random(p.size))
    assert u.dtype == np.float64 and u.min() >= 0 and u.max() <= 1
    res = uniformity(u, 10)
    assert res.df == 9 and res.n == 20_000 and res.expected == 2000.0
    assert res.pvalue >= ALPHA  # size α: fails with probability 0.01 only (fixed seed)
    assert res.ks_pvalue >= ALPHA


def test_pit_of_tokens_from_another_law_is_not_uniform():
    # Tokens from the law at temperature 0.7, tested against the temperature-1 law:
    # TV 0.065; the exact bin probabilities of U give a χ²(9) noncentrality of 534 at
    # 20,000 tokens: power 1 - 1e-80 at α 0.01.
    rng = np.random.default_rng(1)
    law = np.array([0.4, 0.3, 0.2, 0.1])
    wrong = law ** (1 / 0.7) / (law ** (1 / 0.7)).sum()
    x = rng.choice(4, size=20_000, p=wrong)
    cdf = np.concatenate([[0.0], np.cumsum(law)[:-1]])
    u = randomized_pit(cdf[x], law[x], rng.random(x.size))
    assert uniformity(u, 10).pvalue < 1e-6


def test_pit_rounding_above_one_is_clipped_and_shapes_checked():
    u = randomized_pit([0.9999999999999999], [1e-16 + 1e-16], [1.0])
    assert u[0] <= 1.0
    assert bin_of(np.array([1.0, 0.0, 0.55]), 10).tolist() == [9, 0, 5]
    with pytest.raises(ValueError, match="shapes differ"):
        randomized_pit([0.0, 0.1], [0.5], [0.5])


def test_uniformity_without_samples_is_no_evidence():
    res = uniformity(np.zeros(0), 10)
    assert res.df == 0 and np.isnan(res.pvalue)


def test_uniformity_matches_scipy_chisquare():
    rng = np.random.default_rng(2)
    u = rng.random(500)
    res = uniformity(u, 5)
    ref = sps.chisquare(np.bincount((u * 5).astype(int), minlength=5))
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue == pytest.approx(ref.pvalue)


def test_overlapping_lag1_pairs_of_iid_uniforms_keep_the_level():
    # 40 chains of 50 overlapping pairs: the conditional (row-wise) statistic is
    # χ²(12) under the null. Its rejection rate over 300 replications at α = 0.05 must
    # stay within the 99% binomial band of 0.05 (the joint g×g χ² would not: Good 1953).
    rng = np.random.default_rng(3)
    rejections = 0
    for _ in range(300):
        u = rng.random((40, 51))
        res = pair_independence(u[:, :-1].ravel(), u[:, 1:].ravel(), 4)
        assert res.df == 12
        rejections += res.pvalue < 0.05
    assert sps.binom.ppf(0.005, 300, 0.05) <= rejections <= sps.binom.ppf(0.995, 300, 0.05)


def test_dependent_pairs_fail_independence():
    # U_b = U_a + small noise (mod 1): the row tables are far from uniform; noncentrality
    # of thousands at 5,000 pairs, power ~1.
    rng = np.random.default_rng(4)
    a = rng.random(5000)
    b = (a + 0.1 * rng.random(5000)) % 1.0
    assert pair_independence(a, b, 4).pvalue < 1e-10
    # Independent pairs pass (size α, fixed seed).
    assert pair_independence(a, rng.random(5000), 4).pvalue >= ALPHA


def test_pair_correlation_keeps_its_level_on_overlapping_chains():
    # Overlapping lag-1 pairs of i.i.d. uniforms (40 chains of 50 pairs): each centred
    # product is a martingale difference of variance 1/144, so z is N(0, 1). Rejections
    # at α = 0.05 over 300 replications stay in the 99% binomial band of 0.05.
    rng = np.random.default_rng(7)
    rejections = 0
    for _ in range(300):
        u = rng.random((40, 51))
        res = pair_correlation(u[:, :-1].ravel(), u[:, 1:].ravel())
        assert res.df == 1 and res.n == 2000
        rejections += res.pvalue < 0.05
    assert sps.binom.ppf(0.005, 300, 0.05) <= rejections <= sps.binom.ppf(0.995, 300, 0.05)


def test_pair_correlation_sees_a_shared_uniform_through_the_pit_noise():
    # Negative control: both members driven by one uniform w, each spread over a cell of
    # width 0.5 (a randomized PIT of tokens of mass 1/2): Cov = Var(cell) = 1/16, so
    # E z = (n / 16) / sqrt(n / 144) = 0.75 sqrt(n), about 34 at 2,000 pairs (power ~1).
    rng = np.random.default_rng(8)
    w = rng.random(2000)
    cell = np.floor(w * 2) / 2
    a, b = cell + 0.5 * rng.random(2000), cell + 0.5 * rng.random(2000)
    res = pair_correlation(a, b)
    assert res.z > 8 and res.pvalue < 1e-12
    # Identical members: z = S / sqrt(n / 144) with S = sum (w - 1/2)^2 (about n / 12,
    # so z is about sqrt(n)).
    same = pair_correlation(w, w)
    assert same.z == pytest.approx(((w - 0.5) ** 2).sum() / np.sqrt(2000 / 144), rel=1e-12)
    assert same.z > 0.8 * np.sqrt(2000)
    # Fewer pairs than min_pairs: no p-value (no evidence, never a pass).
    few = pair_correlation(w[:10], w[:10], min_pairs=50)
    assert few.df == 0 and np.isnan(few.pvalue)
    with pytest.raises(ValueError, match="differ in shape"):
        pair_correlation(w[:3], w[:4])


def test_sparse_pair_rows_are_left_out():
    # 30 pairs: 30/4/4 < 5 per cell in every row, nothing testable.
    rng = np.random.default_rng(5)
    res = pair_independence(rng.random(30), rng.random(30), 4)
    assert res.df == 0 and np.isnan(res.pvalue) and res.rows_tested == ()


def _drafts(n: int, rng, shift: float = 0.0, at: int = 2):
    position = rng.integers(0, 3, n)
    tv = rng.uniform(0.1, 0.5, n)
    rate = tv + np.where(position == at, shift, 0.0)
    return position, rng.random(n) < rate, tv


def test_acceptance_counts_at_the_exact_rate_pass():
    rng = np.random.default_rng(6)
    res = acceptance_counts(*_drafts(6000, rng))
    assert res.df == 3 and len(res.cells) == 3
    assert res.pvalue >= ALPHA and res.total_pvalue >= ALPHA
    assert res.expected == pytest.approx(sum(c.expected for c in res.cells))


def test_acceptance_off_by_five_points_at_one_position_fails():
    # +0.05 at position 2 (about 2,000 drafts, Var ~ 400): z ≈ 5 in that cell, χ²(3)
    # noncentrality ≈ 25: power 0.97 at α 0.01 (scipy's ncx2); this seed rejects.
    rng = np.random.default_rng(7)
    res = acceptance_counts(*_drafts(6000, rng, shift=0.05))
    assert res.pvalue < ALPHA
    assert res.cells[2].z > 3


def test_acceptance_pools_sparse_tail_positions_and_flags_impossible_rejections():
    pos = np.array([0] * 200 + [1] * 3)
    tv = np.full(203, 0.3)
    rej = np.arange(203) % 3 == 0
    res = acceptance_counts(pos, rej, tv)
    assert [c.positions for c in res.cells] == [(0, 1)]
    # TV 0 everywhere yet a rejection: impossible under the null.
    imp = acceptance_counts(np.zeros(10, int), np.arange(10) == 0, np.zeros(10))
    assert imp.pvalue == 0.0 and np.isinf(imp.statistic)
    with pytest.raises(ValueError, match="tv"):
        acceptance_counts(np.zeros(1, int), np.zeros(1, bool), np.array([1.5]))
