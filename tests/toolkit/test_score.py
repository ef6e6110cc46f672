"""The score test along pre-registered directions (specconform.stats.score) and the
``joint_score`` distribution test built on it."""

import copy
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from specconform.calibration import evaluate_frames, load_reference, simulate, world_from_reference
from specconform.protocol.load import load_protocol
from specconform.stats.score import ScoreStratum, score_noncentrality, score_test

ROOT = Path(__file__).resolve().parents[2]
NULL = np.array([0.5, 0.3, 0.15, 0.05, 0.0])
DIRS = np.array([[0.05, -0.02, -0.02, -0.01, 0.0], [0.0, 0.03, -0.03, 0.0, 0.0]])


def _strata(rng, law, sizes=(300, 120)):
    return [ScoreStratum(rng.multinomial(n, law), NULL, DIRS) for n in sizes]


def test_null_rejection_rate_and_uniformity():
    # 400 null replications at alpha = 0.05: the count of rejections is Binomial(400,
    # <= 0.05) for a valid Monte Carlo p-value; 34 bounds it with probability > 0.999.
    # Uniformity: KS p > 0.001 (fixed seeds; a valid test fails it 1 time in 1000).
    rng = np.random.default_rng(11)
    p = np.array(
        [score_test(_strata(rng, NULL), replications=199, seed=r).pvalue for r in range(400)]
    )
    assert np.sum(p <= 0.05) <= 34
    assert sps.kstest(p, "uniform").pvalue > 1e-3


def test_alternative_along_a_direction_is_rejected_and_matches_its_noncentrality():
    # Alternative NULL + 2 DIRS[0] at n = 420: predicted lambda ~ 9.9 on 2 df; mean of T
    # over 300 draws is df + lambda within 12 % (its sd over 300 draws is ~0.3). The
    # correct law (negative control) is not rejected more than the null rate allows.
    alt = NULL + 2 * DIRS[0]
    lam, df, oos = score_noncentrality([(300, NULL, DIRS, alt), (120, NULL, DIRS, alt)])
    assert df == 2 and oos == 0.0 and lam > 5
    rng = np.random.default_rng(12)
    t = [score_test(_strata(rng, alt), replications=99, seed=r).statistic for r in range(300)]
    assert np.mean(t) == pytest.approx(df + lam, rel=0.12)
    res = score_test(_strata(np.random.default_rng(3), NULL + 4 * DIRS[0]), seed=1)
    assert res.pvalue == pytest.approx(1 / 2000)  # the smallest Monte Carlo p-value


def test_impossible_observation_and_no_evidence():
    counts = np.array([10, 5, 3, 1, 1])  # one observation where the null is 0
    res = score_test([ScoreStratum(counts, NULL, DIRS)])
    assert res.pvalue == 0.0 and np.isinf(res.statistic) and res.out_of_support == 1
    flat = score_test([ScoreStratum(counts[:4], NULL[:4], np.zeros((2, 4)))])
    assert flat.df == 0 and np.isnan(flat.pvalue)  # no direction moves a cell


@pytest.fixture(scope="module")
def gate():
    protocol = load_protocol(ROOT / "protocols/ci_gate.yaml").data
    world = world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))
    return protocol, world


def test_joint_score_in_the_evaluator(gate):
    # ci_gate at 1,000 seeds per group, fixed seed: the correct sampler passes
    # score_async_d1; shared_uniform fails it (exact-law power of score_async_d1 at
    # 1,000 seeds and the Holm first-step level 0.001: 0.95; the omnibus joint_async_d1's
    # 0.11: specconform.planning.mutant_power). At the family level 0.005 (the numerics
    # reserve) the first step is 0.0005, which a p-value of 1,999 draws (>= 0.0005) never
    # passes: the draws follow the level (3,999 here; stats.score.replications_for).
    protocol, w = gate
    rows = {}
    for mutant in (None, "shared_uniform"):
        s = simulate(w, 1000, np.random.default_rng(21), mutant=mutant, groups=protocol["groups"])
        ev = evaluate_frames(protocol, s, w.reference)
        rows[mutant] = {r.test: r for r in ev.tests}
    clean, bug = rows[None]["score_async_d1"], rows["shared_uniform"]["score_async_d1"]
    assert clean.passed and clean.df == 5 and clean.pvalue > 0.01
    assert clean.detail.strata_count >= 5  # every observed t1, no min_samples
    assert bug.passed is False and bug.pvalue <= 0.001
    assert bug.detail.mc_replications == 3999 and bug.pvalue < 0.005 / 10
    assert rows["shared_uniform"]["joint_async_d1"].passed is not False
    # Deterministic: the Monte Carlo seed is the test's name (verify recomputes it).
    again = evaluate_frames(
        protocol,
        simulate(w, 1000, np.random.default_rng(21), groups=protocol["groups"]),
        w.reference,
    )
    assert {r.test: r for r in again.tests}["score_async_d1"].pvalue == clean.pvalue


def test_joint_score_needs_a_speculative_group(gate):
    protocol, _ = gate
    bad = copy.deepcopy(protocol)
    bad["tests"].append(
        {"name": "s", "type": "joint_score", "role": "primary", "groups": ["nospec"]}
    )
    from specconform.protocol.schema import DistributionProtocol

    with pytest.raises(ValueError, match="needs a speculative group"):
        DistributionProtocol.model_validate(bad)


def test_draws_follow_the_family_level():
    """The smallest Monte Carlo p-value stays at most half of Holm's first step; files
    without a reserve (level/m >= 0.001) keep their 1,999 draws and so their p-values."""
    from specconform.stats.score import DEFAULT_REPLICATIONS, replications_for

    assert replications_for(0.01, 10) == DEFAULT_REPLICATIONS == 1999  # ci_gate before
    assert replications_for(0.01, 6) == 1999  # fp32_t2
    assert replications_for(0.005, 10) == 3999  # ci_gate with the reserve
    for level, m in ((0.005, 10), (0.001, 7), (0.01, 40)):
        assert 1 / (replications_for(level, m) + 1) <= level / m / 2
