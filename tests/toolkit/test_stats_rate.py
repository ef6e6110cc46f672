"""Rate test (rejection rate vs TV), exact speculative laws and cell helpers."""

import numpy as np
import pytest
from scipy import stats as sps

from specconform.stats.cells import align, on_union, strata
from specconform.stats.rate import rate_test, stratified_rate_test
from specconform.stats.speculative import joint_cells, total_variation


def test_rate_test_matches_binomtest_and_pearson():
    r = rate_test(30, 200, 0.1)
    # The decision p-value is the exact binomial; the 2-cell chi2 is reported beside it.
    assert r.pvalue == pytest.approx(sps.binomtest(30, 200, 0.1).pvalue)
    ref = sps.chisquare([170, 30], [180, 20])
    assert r.chi2_statistic == pytest.approx(ref.statistic)
    assert r.chi2_pvalue == pytest.approx(ref.pvalue)
    assert (r.chi2_df, r.n, r.k, r.rate, r.statistic) == (1, 200, 30, 0.15, 0.15)


def test_rate_test_event_of_probability_zero_is_fatal():
    r = rate_test(1, 200, 0.0)
    assert r.out_of_support == 1 and r.pvalue == 0.0 and r.chi2_pvalue == 0.0
    ok = rate_test(0, 200, 0.0)
    assert ok.pvalue == 1.0 and ok.chi2_df == 0  # exact: 0 events of rate 0 is certain


def test_rate_test_sparse_cell_pools_to_untestable():
    r = rate_test(1, 50, 0.02)  # expected 1 rejection < 5: pooled into the other cell
    assert r.chi2_df == 0 and np.isnan(r.chi2_pvalue) and r.pooled == (1, 0)
    assert r.pvalue == pytest.approx(sps.binomtest(1, 50, 0.02).pvalue)


def test_rate_test_decides_on_the_exact_binomial_where_chi2_has_no_df():
    # Issue 10: 6 events in 250 at rate 0.01 (expected 2.5: the chi2 pools to df 0 and
    # used to read p = 1). The exact two-sided binomial p is 0.041.
    r = rate_test(6, 250, 0.01)
    assert r.chi2_df == 0 and np.isnan(r.chi2_pvalue)
    assert r.pvalue == pytest.approx(0.0412, abs=5e-4)
    # Negative control: 12 events at rate 0.01 is far too many; the exact p rejects at
    # alpha 0.01 where the pooled chi2 could not.
    assert rate_test(12, 250, 0.01).pvalue < 1e-4


def test_stratified_rate_test_is_bonferroni_over_exact_strata():
    a, b = rate_test(30, 200, 0.1), rate_test(6, 250, 0.01)
    comb = stratified_rate_test([a, b])
    assert comb.pvalue == pytest.approx(min(1.0, 2 * min(a.pvalue, b.pvalue)))
    assert (comb.n, comb.k, comb.deciding_stratum) == (450, 36, 0)  # p 0.024 < 0.041
    assert comb.expected_events == pytest.approx(200 * 0.1 + 250 * 0.01)
    assert np.isnan(stratified_rate_test([]).pvalue)


def test_rate_test_rejects_bad_input():
    with pytest.raises(ValueError):
        rate_test(5, 4, 0.1)
    with pytest.raises(ValueError):
        rate_test(1, 4, 1.5)


def test_total_variation_and_joint_cells():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.3, 0.1, 0.4])
    assert total_variation(p, q) == pytest.approx(0.4)
    cells = joint_cells(p, q)
    assert cells.tolist() == pytest.approx([0.2, 0.3, 0.1, 0.0, 0.3, 0.0, 0.1, 0.0])
    assert cells.sum() == pytest.approx(1.0)
    assert cells[4:].sum() == pytest.approx(total_variation(p, q))  # P(reject) = TV
    assert (cells[:4] + cells[4:]).tolist() == pytest.approx(p.tolist())  # marginal is p
    assert total_variation(p * 2, q) == pytest.approx(0.4)  # renormalized


def test_strata_threshold():
    keys, counts = strata(np.array([3, 3, 3, 1, 2, 2]), 2)
    assert keys.tolist() == [2, 3] and counts.tolist() == [2, 3]


def test_align_keeps_observed_tokens_outside_support():
    tokens, probs, counts = align(np.array([2, 5]), np.array([0.4, 0.6]), np.array([5, 7, 5]))
    assert tokens.tolist() == [2, 5, 7]
    assert probs.tolist() == [0.4, 0.6, 0.0]
    assert counts.tolist() == [0, 2, 1]


def test_on_union():
    tokens, a, b = on_union(
        np.array([1, 3]), np.array([0.5, 0.5]), np.array([3, 4]), np.array([0.9, 0.1])
    )
    assert tokens.tolist() == [1, 3, 4]
    assert a.tolist() == [0.5, 0.5, 0.0] and b.tolist() == [0.0, 0.9, 0.1]
