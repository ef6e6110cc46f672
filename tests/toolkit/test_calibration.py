"""Calibration machinery: exact laws come from shipped references, the simulator follows
the protocol files' groups and the engine's dependence structure, the harness reads the
verdict from the Evaluation, and the second-level checks can fail. The 1,000-replication
tables are bench/calibration_reference.py's, recorded in docs/calibration.md."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from specconform.calibration import (
    MUTANTS,
    STANDARD_GROUPS,
    load_reference,
    replicate,
    second_level,
    simulate,
    stated_verdict_rate,
    summarize,
    verdict_bound,
    world_from_reference,
)
from specconform.protocol.load import load_protocol
from specconform.stats.speculative import total_variation
from tests.toolkit.fixtures.distribution_run import FP32_ARCHIVE as ARCHIVE
from tests.toolkit.fixtures.distribution_run import ROOT
from tests.toolkit.fixtures.distribution_run import TINY_REFERENCE as TINY


@pytest.fixture(scope="module")
def ci_gate():
    return load_protocol(ROOT / "protocols/ci_gate.yaml").data


def _key(g):
    return (g["name"], g["mode"], g.get("draft_loops"), g.get("seed_offset") or 0)


@pytest.mark.parametrize("name", ["ci_gate", "fp32_t2"])
def test_default_groups_are_the_shipped_layout(name):
    # simulate()'s default must not drift from the protocol files (calibration itself
    # always passes the protocol's own groups).
    data = load_protocol(ROOT / f"protocols/{name}.yaml").data
    assert [_key(g) for g in data["groups"]] == [_key(g) for g in STANDARD_GROUPS]


def test_world_from_the_shipped_archive():
    ref = load_reference(ARCHIVE)
    w = world_from_reference(ref)
    assert w.t1_tokens.size == 20 and w.p1.sum() == pytest.approx(1, abs=1e-6)
    assert set(w.q2) == {1, 2}
    assert np.allclose(w.p2.sum(1), 1, atol=1e-5)
    # Draft-depth TV per stratum is what the engine's laws give: d=1 farther than d=2.
    tv = {
        d: w.p1 @ [total_variation(p, q) for p, q in zip(w.p2, w.q2[d], strict=True)]
        for d in (1, 2)
    }
    assert 0 < tv[2] < tv[1] < 1
    bad = {**ref, "p_t2": {}}
    with pytest.raises(ValueError, match="every possible t1"):
        world_from_reference(bad)


def test_world_matches_targets(world):
    for d, target in ((2, 0.1), (1, 0.35)):
        tv = np.array([total_variation(p, q) for p, q in zip(world.p2, world.q2[d], strict=True)])
        assert tv @ world.p1 == pytest.approx(target, abs=1e-3)
    assert (world.p1 > 0).sum() == 20 and np.isclose(world.p1.sum(), 1)


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
    s = simulate(world, 20000, np.random.default_rng(2), groups=[STANDARD_GROUPS[3]])
    assert (s["first_accepted"] == 0).mean() == pytest.approx(0.35, abs=0.015)


def test_unknown_mutant_is_refused(world):
    with pytest.raises(ValueError, match="unknown mutant"):
        simulate(world, 10, np.random.default_rng(0), mutant="nope")
    assert "residual_from_p" in MUTANTS


def test_harness_reads_the_verdict_and_kills_a_wrong_sampler(world, ci_gate):
    # Negative control of the harness itself: greedy_draft changes the committed t2 law
    # by far more than the ci_gate tests need at 2,000 seeds (power ~1 per replication,
    # docs/kill-matrix.md), so 3 of 3 replications must FAIL, and the verdict column is
    # the Evaluation's.
    runs = replicate(world, ci_gate, 3, seed=11, mutant="greedy_draft")
    summary = summarize(runs, 0.01).set_index("test")
    assert summary.loc["VERDICT", "rejections"] == 3
    assert set(runs["test"]) >= {t["name"] for t in ci_gate["tests"]}
    assert verdict_bound(ci_gate) == pytest.approx(0.10)  # 10 deciding tests at 0.01
    assert stated_verdict_rate(ci_gate) == 0.01


def test_second_level_checks_can_fail():
    rng = np.random.default_rng(3)
    uniform = pd.DataFrame({"test": "u", "pvalue": rng.random(1000)})
    skewed = pd.DataFrame({"test": "s", "pvalue": rng.random(1000) ** 2})  # too many small p
    res = {s.test: s for s in second_level(pd.concat([uniform, skewed]), 0.01)}
    assert res["u"].ks_pvalue > 0.001 and res["u"].proportion_ok
    assert res["s"].ks_pvalue < 1e-6 and res["s"].chi2_pvalue < 1e-6
    assert not res["s"].proportion_ok  # 10 % below 0.01 instead of 1 %


@pytest.mark.slow
def test_small_calibration_of_ci_gate(ci_gate):
    # 50 replications of the shipped ci_gate file from the tiny preset's exact laws, fixed
    # seed. Each deciding test's false fails are ~Binomial(50, 0.01); the bound is its
    # 99.9 % quantile (4), so this check errs with probability <= 0.001 per test. It
    # detects a test whose false-fail rate is >= 0.18 with probability >= 0.96; finer
    # miscalibration is the 1,000-replication bench's job (docs/calibration.md).
    world = world_from_reference(load_reference(TINY))
    runs = replicate(world, ci_gate, 50, seed=7)
    summary = summarize(runs, 0.01).set_index("test")
    bound = sps.binom.ppf(0.999, 50, 0.01)
    assert sps.binom.sf(bound, 50, 0.18) >= 0.96
    for t in ci_gate["tests"]:
        assert summary.loc[t["name"], "rejections"] <= bound, t["name"]
    assert summary.loc["out_of_support", "rejections"] == 0
