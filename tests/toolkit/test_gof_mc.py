"""Monte Carlo p-values of Pearson's χ² (specconform/stats/gof_mc.py) and their use by
the montecarlo kind (``pvalue: monte_carlo``)."""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from specconform.stats import pearson_gof
from specconform.stats.gof_mc import pearson_gof_mc

# A law like a deep Monte Carlo position's: 13 cells, several of expected count ~5 at
# n = 250 (the sizes where the χ² tail is least trustworthy).
LAW = np.array([0.06, 0.07, 0.12, 0.07, 0.05, 0.06, 0.055, 0.016, 0.054, 0.017, 0.1, 0.028, 0.28])
LAW = LAW / LAW.sum()


def test_level_holds_at_small_n_under_the_exact_law():
    # 400 exact multinomial samples of n = 250, R = 999 each (seed 11). A valid p-value
    # has P(p <= 0.05) <= 0.05; the count of p <= 0.05 is then <= Binomial(400, 0.05),
    # whose 99.9 % quantile is 34: the test false-fails with probability < 0.001, and it
    # catches a p-value whose true level at 0.05 is >= 0.12 (power > 0.999).
    rng = np.random.default_rng(11)
    rejections = 0
    for r in range(400):
        observed = rng.multinomial(250, LAW)
        res = pearson_gof_mc(observed, LAW, min_expected=5.0, replications=999, name=f"t{r}")
        rejections += res.pvalue <= 0.05
    assert rejections <= sps.binom.ppf(0.999, 400, 0.05)


def test_negative_control_a_tempered_law_is_rejected():
    # Samples from LAW**0.6 (renormalised) tested against LAW, n = 2000: TV 0.08; the
    # Monte Carlo p-value is at its floor 1/(R+1) (χ² ~ 150 on 12 df).
    tempered = LAW**0.6 / (LAW**0.6).sum()
    observed = np.random.default_rng(12).multinomial(2000, tempered)
    res = pearson_gof_mc(observed, LAW, min_expected=5.0, replications=1999, name="neg")
    assert res.pvalue == 1 / 2000


def test_same_inputs_same_pvalue_and_chi2_agreement_at_large_n():
    # Seeded from the test name and the counts: a verifier recomputes the same p-value.
    observed = np.random.default_rng(13).multinomial(20_000, LAW)
    a = pearson_gof_mc(observed, LAW, min_expected=5.0, replications=19_999, name="same")
    b = pearson_gof_mc(observed, LAW, min_expected=5.0, replications=19_999, name="same")
    assert a == b
    # Statistic, df and pooling are pearson_gof's; at n = 20,000 the χ² law is accurate,
    # so the two p-values agree within Monte Carlo error (sd <= 0.0036 at R = 19,999).
    chi2 = pearson_gof(observed, LAW, min_expected=5.0)
    assert (a.statistic, a.df, a.pooled) == (chi2.statistic, chi2.df, chi2.pooled)
    assert abs(a.pvalue - chi2.pvalue) < 0.02


def test_out_of_support_and_no_evidence_keep_pearson_gof_answers():
    law = np.array([0.5, 0.5, 0.0])
    assert pearson_gof_mc([3, 3, 1], law, min_expected=5.0, replications=999, name="x").pvalue == 0
    one_cell = pearson_gof_mc([4, 0, 0], np.array([1.0, 0, 0]), min_expected=5.0,
                              replications=999, name="y")  # fmt: skip
    assert np.isnan(one_cell.pvalue)


def test_montecarlo_kind_reads_the_pvalue_field():
    # The evaluator takes Monte Carlo p-values only when the protocol says so; an
    # archive's protocol.json from before the field (no `pvalue`) keeps chi2.
    import pandas as pd

    from specconform.kinds import montecarlo
    from specconform.results import RawData

    case = {"name": "c", "vocab": 8, "K": 1, "draft_lens": [1], "law_seed": 3,
            "p_support": 6, "q_support": 5, "concentration": 1.0}  # fmt: skip
    rows = [("c", 0, "accept", t, 40) for t in range(5)] + [
        ("c", 1, "bonus", t, 30) for t in range(6)
    ]
    counts = pd.DataFrame(rows, columns=["case", "position", "cell", "token", "count"])
    raw = RawData({"raw/montecarlo_counts.csv": counts.to_csv(index=False).encode()})
    base = {"alpha": 0.01, "min_expected": 5.0, "cases": [case]}
    old = montecarlo.evaluate(dict(base), raw)
    new = montecarlo.evaluate({**base, "pvalue": "monte_carlo", "mc_replications": 999}, raw)
    methods = {t.pvalue_method for t in old.tests if t.pvalue is not None}
    assert methods == {"chi2"}
    mc_rows = [t for t in new.tests if t.pvalue is not None]
    assert mc_rows and all(t.pvalue_method.startswith("monte carlo") for t in mc_rows)
    # A Monte Carlo p-value is at least 1/(R+1), unless a token fell out of support (0).
    assert all(t.pvalue >= 1 / 1000 or t.detail.out_of_support for t in mc_rows)
