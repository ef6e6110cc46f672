"""Rate test (rejection rate vs TV), exact speculative laws and cell helpers."""
import numpy as np
import pytest
from scipy import stats as sps

from specconform.stats.cells import align, on_union, strata
from specconform.stats.rate import rate_test
from specconform.stats.speculative import joint_cells, total_variation


def test_rate_test_matches_binomtest_and_pearson():
    r = rate_test(30, 200, 0.1)
    assert r.binom_pvalue == pytest.approx(sps.binomtest(30, 200, 0.1).pvalue)
    ref = sps.chisquare([170, 30], [180, 20])
    assert r.statistic == pytest.approx(ref.statistic) and r.pvalue == pytest.approx(ref.pvalue)
    assert (r.df, r.n, r.k, r.rate) == (1, 200, 30, 0.15)


def test_rate_test_event_of_probability_zero_is_fatal():
    r = rate_test(1, 200, 0.0)
    assert r.out_of_support == 1 and r.pvalue == 0.0 and r.binom_pvalue == 0.0
    ok = rate_test(0, 200, 0.0)
    assert ok.pvalue == 1.0 and ok.df == 0  # one cell left: nothing to test


def test_rate_test_sparse_cell_pools_to_untestable():
    r = rate_test(1, 50, 0.02)  # expected 1 rejection < 5: pooled into the other cell
    assert r.df == 0 and r.pvalue == 1.0 and r.pooled == (1, 0)
    assert r.binom_pvalue == pytest.approx(sps.binomtest(1, 50, 0.02).pvalue)


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
    tokens, a, b = on_union(np.array([1, 3]), np.array([0.5, 0.5]), np.array([3, 4]),
                            np.array([0.9, 0.1]))
    assert tokens.tolist() == [1, 3, 4]
    assert a.tolist() == [0.5, 0.5, 0.0] and b.tolist() == [0.0, 0.9, 0.1]
