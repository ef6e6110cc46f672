"""specconform.stats.power against known values, scipy's own tests and simulation."""

import numpy as np
import pytest
from scipy import stats as sps

from specconform.stats import pearson_gof
from specconform.stats.power import (
    binom_detectable_shift,
    binom_power,
    binom_reject_region,
    chi2_power,
    detectable_tv,
    gof_noncentrality,
    homogeneity_noncentrality,
    min_sample_size,
    mixture,
    out_of_support_power,
    required_noncentrality,
)


def test_required_noncentrality_known_values():
    # The figures: λ for power 0.99 at α = 0.01 is 24 at 1 df and 69 at 55 df.
    assert required_noncentrality(1, 0.01, 0.99) == pytest.approx(24.03, abs=0.01)
    assert required_noncentrality(55, 0.01, 0.99) == pytest.approx(69.0, abs=0.5)
    lam = required_noncentrality(7, 0.001, 0.9)
    assert chi2_power(7, lam, 0.001).power == pytest.approx(0.9, abs=1e-9)


def test_power_at_zero_effect_is_alpha_and_grows():
    assert chi2_power(5, 0.0, 0.01).power == pytest.approx(0.01)
    powers = [chi2_power(5, lam, 0.01).power for lam in (1, 5, 20, 50)]
    assert powers == sorted(powers) and powers[-1] > 0.99
    assert chi2_power(3, float("inf"), 0.01).power == 1.0
    with pytest.raises(ValueError, match="df"):
        chi2_power(0, 1.0, 0.01)  # df 0: no evidence, no power


def test_chi2_power_matches_simulated_pearson_test():
    # 4 cells, n = 1500, alternative chosen for power ≈ 0.6. 2,000 replications at a fixed
    # seed: binomial s.e. ≤ 0.011; tolerance 0.04 (3.6 s.e. plus the χ² approximation's
    # own error at expected counts ≥ 150). A wrong λ formula (e.g. missing the factor n
    # or dividing by p_alt) moves the prediction by more than 0.2.
    p0 = np.array([0.4, 0.3, 0.2, 0.1])
    alt = np.array([0.44, 0.28, 0.18, 0.10])
    n, reps = 1500, 2000
    predicted = chi2_power(3, gof_noncentrality(p0, alt, n), 0.01).power
    assert 0.4 < predicted < 0.8
    rng = np.random.default_rng(12345)
    counts = rng.multinomial(n, alt, size=reps)
    rejected = np.mean([pearson_gof(c, p0).pvalue < 0.01 for c in counts])
    assert rejected == pytest.approx(predicted, abs=0.04)
    # Negative control: the same simulation from p0 rejects at about α.
    null = rng.multinomial(n, p0, size=reps)
    assert np.mean([pearson_gof(c, p0).pvalue < 0.01 for c in null]) < 0.02


def test_homogeneity_noncentrality_matches_simulation():
    # Same tolerance argument as above, 2 x 3 table, n_a = n_b = 500.
    a, b = np.array([0.5, 0.3, 0.2]), np.array([0.42, 0.33, 0.25])
    predicted = chi2_power(2, homogeneity_noncentrality(a, b, 500, 500), 0.01).power
    rng = np.random.default_rng(7)
    rej = 0
    for _ in range(2000):
        t = np.vstack([rng.multinomial(500, a), rng.multinomial(500, b)])
        rej += sps.chi2_contingency(t, correction=False).pvalue < 0.01
    assert rej / 2000 == pytest.approx(predicted, abs=0.04)


def test_tv_bound_holds_for_every_alternative():
    # Cauchy–Schwarz: χ²(a ‖ p0) ≥ 4 TV(a, p0)², for random alternatives.
    rng = np.random.default_rng(0)
    for _ in range(200):
        p0, a = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
        tv = 0.5 * np.abs(a - p0).sum()
        assert gof_noncentrality(p0, a) >= 4 * tv**2 - 1e-12
    # ... with equality for the least favourable direction (halves of equal mass).
    p0 = np.array([0.25, 0.25, 0.25, 0.25])
    worst = np.array([0.3, 0.3, 0.2, 0.2])
    assert gof_noncentrality(p0, worst) == pytest.approx(4 * 0.1**2)


def test_detectable_tv_reaches_the_stated_power():
    d = detectable_tv(5000, 10, 0.01)
    assert chi2_power(10, 4 * 5000 * d.tv**2, 0.01).power == pytest.approx(0.99, abs=1e-9)
    p0, r = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    m = detectable_tv(2000, 2, 0.01, p0=p0, r=r)
    alt = mixture(p0, r, m.mixture)
    assert 0.5 * np.abs(alt - p0).sum() == pytest.approx(m.tv)
    assert chi2_power(2, gof_noncentrality(p0, alt, 2000), 0.01).power == pytest.approx(0.99)
    assert detectable_tv(2000, 2, 0.01, p0=p0, r=p0).tv == float("inf")


def test_min_sample_size_is_the_smallest():
    s = min_sample_size(0.01, 4, 0.01)
    assert s.n * 0.01 >= s.required > (s.n - 1) * 0.01
    assert chi2_power(4, s.n * 0.01, 0.01).power >= 0.99
    assert chi2_power(4, (s.n - 1) * 0.01, 0.01).power < 0.99
    assert min_sample_size(0.0, 4, 0.01).n == float("inf")


@pytest.mark.parametrize("n,p0", [(30, 0.2), (57, 0.5), (100, 0.03), (12, 0.9)])
def test_binomial_rejection_region_equals_scipy_binomtest(n, p0):
    mask = binom_reject_region(n, p0, 0.05)
    expected = [sps.binomtest(k, n, p0).pvalue < 0.05 for k in range(n + 1)]
    assert mask.tolist() == expected


def test_binomial_power_exact():
    res = binom_power(200, 0.1, 0.2, 0.01)
    direct = sum(
        sps.binom.pmf(k, 200, 0.2) for k in range(201) if sps.binomtest(k, 200, 0.1).pvalue < 0.01
    )
    assert res.power == pytest.approx(direct, rel=1e-12)
    assert res.size <= 0.01  # exact test: conservative at finite n
    assert binom_power(200, 0.1, 0.1, 0.01).power == pytest.approx(res.size)
    down, up = binom_detectable_shift(1000, 0.3, 0.01)
    assert binom_power(1000, 0.3, 0.3 + up, 0.01).power == pytest.approx(0.99, abs=1e-6)
    assert binom_power(1000, 0.3, 0.3 - down, 0.01).power == pytest.approx(0.99, abs=1e-6)


def test_out_of_support_power():
    assert out_of_support_power(0.0, 1000) == 0.0
    assert out_of_support_power(0.01, 100) == pytest.approx(1 - 0.99**100)
    assert gof_noncentrality([0.5, 0.5, 0.0], [0.5, 0.4, 0.1]) == float("inf")
