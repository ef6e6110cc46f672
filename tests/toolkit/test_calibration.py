"""Calibration machinery: the simulator reproduces the engine's dependence structure and
the first-position mechanism, and a small calibration run keeps the false-fail rate of
every test inside a stated binomial bound (the full 1,000-replication run is
bench/calibration_reference.py, recorded in docs/calibration.md)."""
import numpy as np
import pytest
from scipy import stats as sps

from specconform.calibration import (
    GROUPS,
    MUTANTS,
    PROTOCOL,
    make_world,
    replicate,
    simulate,
    summarize,
    verdict_bound,
)
from specconform.stats.speculative import total_variation


@pytest.fixture(scope="module")
def world():
    return make_world(0)


def test_world_matches_targets(world):
    for d, target in ((2, 0.1), (1, 0.35)):
        tv = np.array([total_variation(p, q) for p, q in zip(world.p2, world.q2[d], strict=True)])
        assert tv @ world.p1 == pytest.approx(target, abs=1e-3)
    assert (world.p1 > 0).sum() == 20 and np.isclose(world.p1.sum(), 1)
    assert ((world.p2 > 0).sum(1) == 20).all()  # top-k 20 supports


def test_shared_seeds_share_randomness(world):
    s = simulate(world, 3000, np.random.default_rng(0))
    by = {g: f.reset_index(drop=True) for g, f in s.groupby("group")}
    cols = ["seed", "t1", "t2", "t3", "first_accepted"]
    assert by["sync"][cols].equals(by["async"][cols])
    assert by["sync_d1"][cols].equals(by["async_d1"][cols])
    assert (by["sync"]["t1"] == by["sync_d1"]["t1"]).all()  # all speculative groups share t1
    assert not set(by["nospec"]["seed"]) & set(by["sync"]["seed"])
    assert (by["nospec"]["first_accepted"] == -1).all()


def test_rejection_rate_is_tv(world):
    # Pooled over strata, the first-position rejection rate is E_t1[TV] = 0.35 at depth 1;
    # 20,000 samples give a standard error of 0.0034, tolerance 0.015 (> 4 s.e.).
    s = simulate(world, 20000, np.random.default_rng(2), groups=[GROUPS[3]])
    assert (s["first_accepted"] == 0).mean() == pytest.approx(0.35, abs=0.015)


def test_unknown_mutant_is_refused(world):
    with pytest.raises(ValueError, match="unknown mutant"):
        simulate(world, 10, np.random.default_rng(0), mutant="nope")
    assert "residual_from_p" in MUTANTS


SMALL = {**PROTOCOL, "tests": [t for t in PROTOCOL["tests"] if t["name"] in (
    "t1_nospec", "t1_speculative", "t2_async", "t2_async_vs_nospec", "t2_async_vs_sync",
    "t3_async", "acceptance_async_d1", "joint_async_d1")]}


@pytest.mark.slow
def test_small_calibration_run_is_inside_binomial_bound(world):
    reps = 200
    runs = replicate(world, reps, 5000, seed=7, protocol=SMALL)
    summary = summarize(runs, PROTOCOL["alpha"]).set_index("test")
    # Under the exact law each test's false fails are ~Binomial(200, 0.01). Bound: its
    # 99.9 % quantile (8), i.e. this check itself errs with probability <= 0.001 per test;
    # a test whose true false-fail rate were 0.05 would exceed it with probability 0.67.
    bound = sps.binom.ppf(0.999, reps, PROTOCOL["alpha"])
    for name in [t["name"] for t in SMALL["tests"]]:
        assert summary.loc[name, "rejections"] <= bound, name
    assert summary.loc["out_of_support", "rejections"] == 0
    # Verdict: 4 deciding alpha-level tests -> FAIL rate <= 0.04 (union bound); its
    # Binomial(200, 0.04) 99.9 % quantile is the check.
    assert verdict_bound(SMALL) == pytest.approx(0.04)
    assert summary.loc["VERDICT", "rejections"] <= sps.binom.ppf(0.999, reps, 0.04)
