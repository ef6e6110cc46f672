"""The exact first-position laws of planted bugs against the engine-free simulator."""

import numpy as np
import pytest

from specconform.calibration import MUTANTS, STANDARD_GROUPS, make_world, simulate
from specconform.stats import pearson_gof
from specconform.stats.mutant_laws import EXACT, bf16, first_position_law


@pytest.fixture(scope="module")
def stratum():
    # Depth 1 (TV 0.35), the largest t1 stratum: 13,020 of 40,000 seeds at this seed.
    w = make_world(0)
    i = int(np.argmax(w.p1))
    m = int((w.u_tokens[i] >= 0).sum())
    return w, i, m


# The engine-free bugs (the engine-only ones: tests/toolkit/test_engine_mutant_laws.py).
@pytest.mark.parametrize("mutant", [m for m in EXACT if m in MUTANTS])
def test_exact_law_matches_simulation(stratum, mutant):
    # The derived joint law (accept/reject x token) fits 13,020 simulated samples of the
    # mutant: a Pearson test at alpha = 0.001 (fixed seed; a correct law fails with
    # probability 0.001). Negative control: the correct sampler's law is rejected at
    # p < 1e-6 for every mutant except bf16_q, whose effect (bf16 rounding of q, relative
    # error <= 2^-9) is far below what 13,000 samples can see.
    w, i, m = stratum
    s = simulate(w, 40000, np.random.default_rng(1), mutant=mutant, groups=[STANDARD_GROUPS[4]])
    s = s[s.t1 == w.t1_tokens[i]]
    col = np.searchsorted(w.u_tokens[i, :m], s.t2.to_numpy())
    counts = np.bincount(col + np.where(s.first_accepted.to_numpy() == 1, 0, m), minlength=2 * m)
    p, q, q2 = w.p2[i, :m], w.q2[1][i, :m], w.q2[2][i, :m]
    law = first_position_law(p, q, mutant, q_other=q2)
    assert law.joint.sum() == pytest.approx(1.0)
    assert pearson_gof(counts, law.joint).pvalue > 1e-3
    if mutant != "bf16_q":
        assert pearson_gof(counts, first_position_law(p, q).joint).pvalue < 1e-6


def test_correct_law_and_bf16():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.2, 0.2, 0.3, 0.3])
    law = first_position_law(p, q)
    assert np.allclose(law.committed, p) and law.reject_rate == pytest.approx(0.4)
    assert np.allclose(first_position_law(p, q, "q_one_hot").committed, p)  # law exact
    assert bf16(np.array([1.0, 0.1]))[1] == pytest.approx(0.10009765625)  # 0x3DCD
    with pytest.raises(ValueError, match="no exact law"):
        first_position_law(p, q, "no_such_bug")
