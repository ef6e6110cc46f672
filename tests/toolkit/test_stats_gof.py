"""Pooling rule, Pearson goodness of fit, homogeneity and aggregation: hand-checked
cases and agreement with scipy on data that needs no pooling."""

import numpy as np
import pytest
from scipy import stats as sps

from specconform.stats import (
    bonferroni,
    pearson_gof,
    pearson_homogeneity,
    pool_cells,
    sum_chi2,
)

# --- pooling rule -------------------------------------------------------------------


def test_pool_sparse_cells_in_order_of_expected():
    pl = pool_cells(np.array([10.0, 2.0, 1.0, 7.0, 3.0]), 5.0)
    assert pl.pooled == (2, 1, 4)  # increasing expected count: 1, 2, 3 (sum 6 >= 5)
    assert pl.cells == 3
    assert pl.group.tolist() == [0, 2, 2, 1, 2]


def test_pooled_cell_still_sparse_is_merged_into_smallest_remaining():
    pl = pool_cells(np.array([10.0, 2.0, 1.0, 7.0]), 5.0)
    assert pl.pooled == (2, 1, 3)  # 1 + 2 = 3 < 5, absorbed by the 7-cell
    assert pl.cells == 2
    assert pl.group.tolist() == [0, 1, 1, 1]


def test_pooling_ties_broken_by_lower_index():
    assert pool_cells(np.array([3.0, 3.0, 20.0, 20.0])).pooled == (0, 1)
    # sparse ties: 2.0 at 0 and 1 -> index order; absorbing ties 20/20 -> index 2
    assert pool_cells(np.array([2.0, 2.0, 20.0, 20.0])).pooled == (0, 1, 2)


def test_zero_expected_cells_are_never_pooled():
    pl = pool_cells(np.array([0.0, 1.0, 10.0, 12.0]))
    assert pl.group[0] == -1
    assert pl.pooled == (1, 2)
    assert pl.cells == 2


def test_pool_all_sparse_and_none_sparse():
    all_sparse = pool_cells(np.array([1.0, 1.0, 1.0]))
    assert all_sparse.pooled == (0, 1, 2) and all_sparse.cells == 1
    none_sparse = pool_cells(np.array([5.0, 6.0, 7.0]))
    assert none_sparse.pooled == () and none_sparse.cells == 3


def test_pooling_apply_sums_into_final_cells():
    pl = pool_cells(np.array([10.0, 2.0, 1.0, 7.0, 3.0]))
    assert pl.apply(np.array([1, 2, 3, 4, 5])).tolist() == [1.0, 4.0, 10.0]


# --- goodness of fit ----------------------------------------------------------------


def test_gof_matches_scipy_without_pooling():
    obs = np.array([30, 25, 25, 20])
    p = np.array([0.3, 0.3, 0.2, 0.2])
    r = pearson_gof(obs, p)
    ref = sps.chisquare(obs, 100 * p)
    assert r.statistic == pytest.approx(ref.statistic)
    assert r.pvalue == pytest.approx(ref.pvalue)
    assert (r.df, r.n, r.cells, r.pooled, r.out_of_support) == (3, 100, 4, (), 0)


def test_gof_pools_by_hand():
    # n = 100: expected 60, 30, 4, 3, 3 -> pool (3, 4, 2) = 10 >= 5; cells [60, 30, 10]
    obs = np.array([55, 33, 5, 4, 3])
    p = np.array([0.6, 0.3, 0.04, 0.03, 0.03])
    r = pearson_gof(obs, p)
    assert r.pooled == (3, 4, 2)
    assert r.cells == 3 and r.df == 2
    ref = sps.chisquare([55, 33, 12], [60, 30, 10])
    assert r.statistic == pytest.approx(ref.statistic)
    assert r.pvalue == pytest.approx(ref.pvalue)
    assert r.observed == (55, 33, 12)
    assert r.expected == pytest.approx((60.0, 30.0, 10.0))


def test_gof_renormalizes_probs():
    obs = np.array([48, 52])
    r = pearson_gof(obs, np.array([0.5, 0.5 + 1e-6]))
    assert r.pvalue == pytest.approx(sps.chisquare(obs, [50, 50]).pvalue, rel=1e-4)


def test_gof_out_of_support_is_fatal():
    r = pearson_gof(np.array([50, 49, 1]), np.array([0.5, 0.5, 0.0]))
    assert r.out_of_support == 1
    assert r.statistic == np.inf and r.pvalue == 0.0
    assert r.n == 100


def test_gof_single_cell_is_untestable():
    r = pearson_gof(np.array([7, 0]), np.array([1.0, 0.0]))
    # df 0: no evidence, p NaN (scipy's convention), never a p of 1 that reads as a pass.
    assert (r.statistic, r.df) == (0.0, 0) and np.isnan(r.pvalue)


def test_gof_rejects_bad_input():
    with pytest.raises(ValueError):
        pearson_gof(np.array([1, 2]), np.array([0.5, 0.3, 0.2]))
    with pytest.raises(ValueError):
        pearson_gof(np.array([1, -2]), np.array([0.5, 0.5]))


# --- homogeneity --------------------------------------------------------------------


def test_homogeneity_matches_scipy_without_pooling():
    a = np.array([40, 35, 25])
    b = np.array([30, 45, 25])
    r = pearson_homogeneity(a, b)
    ref = sps.chi2_contingency(np.vstack([a, b]), correction=False)
    assert r.statistic == pytest.approx(ref.statistic)
    assert r.pvalue == pytest.approx(ref.pvalue)
    assert (r.df, r.n, r.n_a, r.n_b, r.pooled) == (2, 200, 100, 100, ())


def test_homogeneity_two_cells_has_no_continuity_correction():
    a, b = np.array([60, 40]), np.array([45, 55])
    r = pearson_homogeneity(a, b)
    ref = sps.chi2_contingency(np.vstack([a, b]), correction=False)
    assert r.statistic == pytest.approx(ref.statistic) and r.df == 1


def test_homogeneity_pools_and_drops_empty_columns():
    a = np.array([50, 40, 3, 2, 0, 5])
    b = np.array([45, 47, 2, 1, 0, 5])
    r = pearson_homogeneity(a, b)
    # smaller row n = 100, N = 200: column expectations 47.5, 43.5, 2.5, 1.5, 0, 5
    # -> pool (3, 2) = 4 < 5, absorbed into the smallest dense column 5; col 4 dropped
    assert r.pooled == (3, 2, 5)
    assert r.cells == 3
    ref = sps.chi2_contingency(np.array([[50, 40, 10], [45, 47, 8]]), correction=False)
    assert r.statistic == pytest.approx(ref.statistic)
    assert r.pvalue == pytest.approx(ref.pvalue)


def test_homogeneity_empty_sample_is_untestable():
    r = pearson_homogeneity(np.array([5, 5]), np.array([0, 0]))
    assert (r.statistic, r.df) == (0.0, 0) and np.isnan(r.pvalue)


# --- aggregation --------------------------------------------------------------------


def test_sum_chi2_sums_statistic_and_df():
    r1 = pearson_gof(np.array([30, 25, 25, 20]), np.array([0.3, 0.3, 0.2, 0.2]))
    r2 = pearson_gof(np.array([55, 45]), np.array([0.5, 0.5]))
    agg = sum_chi2([r1, r2])
    assert agg.statistic == pytest.approx(r1.statistic + r2.statistic)
    assert agg.df == 4 and agg.n == 200 and agg.strata == 2
    assert agg.pvalue == pytest.approx(sps.chi2.sf(agg.statistic, 4))


def test_sum_chi2_inf_and_empty():
    bad = pearson_gof(np.array([50, 49, 1]), np.array([0.5, 0.5, 0.0]))
    ok = pearson_gof(np.array([55, 45]), np.array([0.5, 0.5]))
    assert sum_chi2([ok, bad]).pvalue == 0.0
    empty = sum_chi2([])
    assert (empty.statistic, empty.df, empty.strata) == (0.0, 0, 0) and np.isnan(empty.pvalue)
    assert not empty.has_evidence
    # Strata that each pooled to one cell: df 0 in total, still no evidence.
    single = pearson_gof(np.array([7, 0]), np.array([1.0, 0.0]))
    assert not sum_chi2([single, single]).has_evidence and sum_chi2([ok]).has_evidence


def test_bonferroni():
    r = bonferroni([0.2, 0.004, 0.5, 0.9])
    assert r.pvalue == pytest.approx(0.016) and r.m == 4 and r.argmin == 1
    assert bonferroni([0.6, 0.7]).pvalue == 1.0
    assert np.isnan(bonferroni([]).pvalue) and bonferroni([]).m == 0
    # A part without evidence (NaN) is left out of m; it does not dilute the others.
    part = bonferroni([float("nan"), 0.004, 0.5])
    assert part.pvalue == pytest.approx(0.008) and part.m == 2 and part.argmin == 1
