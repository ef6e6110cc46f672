"""The TV estimator of lossy samplers (specconform/stats/tv.py), calibrated by replication
on laws whose distance is known exactly: SGLang's threshold rule as the reference tree
sampler implements it (kinds.tree.laws.threshold_law) against the exact target law.

Coverage check: R = 300 replications of n = 4000 draws, interval at miss rate delta = 0.1;
the observed coverage must be at least 1 - delta - 3 standard errors (a false-fail rate of
about 0.001 for a correct interval). The interval is conservative (Weissman's bound holds
at any n), so its coverage is near 1. Negative control: a naive normal interval around
the plug-in (a planted wrong interval) fails the same check at TV = 0. All seeded.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from specconform.kinds.tree.laws import position_cells, target_law, threshold_law, tree_of
from specconform.report.tree import TREE_TV_SECTION
from specconform.stats.tv import tv_interval, weissman_eps
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.tree_helpers import run_tree

CASES = yaml.safe_load((ROOT / "protocols" / "tree_lossy.yaml").read_text())["cases"]


def _laws(case, j, ts, ta):
    """(target cell probabilities, sampler probabilities on those cells, mass outside)."""
    tree = tree_of(case)
    exact = position_cells(target_law(tree), j)
    lossy = position_cells(threshold_law(tree, ts, ta), j)
    keys = list(exact)
    target = np.array([exact[k] for k in keys])
    inside = np.array([lossy.get(k, 0.0) for k in keys])
    return target, inside, max(0.0, 1.0 - inside.sum())


def _true_tv(target, inside, outside):
    return 0.5 * (np.abs(target - inside).sum() + outside)


R, N, DELTA = 300, 4000, 0.1
FLOOR = 1 - DELTA - 3 * np.sqrt(DELTA * (1 - DELTA) / R)


def _replicate(case, ts, ta, interval):
    """(truth, coverage of `interval(counts, target)` over R seeded replications, mean
    plug-in, mean estimate)."""
    target, inside, outside = _laws(case, 1, ts, ta)
    truth = _true_tv(target, inside, outside)
    law = np.append(inside, outside)
    law = law / law.sum()
    rng = np.random.Generator(np.random.PCG64(11))
    covered, plugins, estimates = 0, [], []
    for i in range(R):
        counts = rng.multinomial(N, law)
        est = tv_interval(counts[:-1], target, int(counts[-1]), DELTA, boots=100, seed=i)
        lower, upper = interval(counts, target, est, i)
        covered += lower <= truth <= upper
        plugins.append(est.plugin)
        estimates.append(est.estimate)
    return truth, covered / R, float(np.mean(plugins)), float(np.mean(estimates))


def _weissman(counts, target, est, i):
    return est.lower, est.upper


def _naive_normal(counts, target, est, i):
    """The planted wrong interval: plug-in +/- 1.645 bootstrap SDs (no bias correction)."""
    rng = np.random.Generator(np.random.PCG64(1000 + i))
    freq = counts / counts.sum()
    law = np.append(target, 0.0)
    boot = 0.5 * np.abs(rng.multinomial(counts.sum(), freq, size=100) / counts.sum() - law).sum(1)
    sd = float(boot.std())
    return est.plugin - 1.645 * sd, est.plugin + 1.645 * sd


@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (1.0, 0.5), (0.3, 0.3)])
def test_interval_covers_the_true_tv(ts, ta):
    truth, coverage, plugin, estimate = _replicate(CASES[0], ts, ta, _weissman)
    assert coverage >= FLOOR
    if (
        truth < 1e-12
    ):  # TV 0 (up to rounding): the bias correction moves the estimate towards the truth
        assert estimate < plugin
    else:
        assert abs(estimate - truth) < 0.02


def test_negative_control_a_naive_interval_fails_the_coverage_check():
    # At TV = 0 the plug-in is biased upwards, so plug-in +/- 1.645 SD misses the truth far
    # more often than delta: the coverage check above can fail.
    truth, coverage, _, _ = _replicate(CASES[0], 1.0, 1.0, _naive_normal)
    assert truth < 1e-12 and coverage < FLOOR


def test_half_width_shrinks_as_one_over_sqrt_n():
    assert weissman_eps(20, 40_000, 0.05) == pytest.approx(weissman_eps(20, 10_000, 0.05) / 2)


def test_lossy_protocol_on_the_reference_sampler_covers_every_exact_distance():
    """End to end: every TV row of protocols/tree_lossy.yaml contains the exact distance
    of the reference sampler's rule (simultaneous 95%: with these seeds, all of them)."""
    evaluation, _ = run_tree("tree_lossy")
    protocol = yaml.safe_load((ROOT / "protocols" / "tree_lossy.yaml").read_text())
    by_name = {c["name"]: c for c in protocol["cases"]}
    rows = [t for t in evaluation.tests if t.test.endswith("_tv")]
    assert len(rows) == len(protocol["settings"]) * sum(
        tree_of(c).height + 1 for c in protocol["cases"]
    )
    for row in rows:
        d = row.detail
        s = protocol["settings"][d.setting]
        truth = _true_tv(*_laws(by_name[d.case], d.position, s["threshold_single"],
                                s["threshold_acc"]))  # fmt: skip
        assert d.lower <= truth <= d.upper, (row.test, truth, d.lower, d.upper)
        assert row.passed == (d.upper <= protocol["max_tv"])
    # The exact setting is within max_tv; the most lossy one is not (the verdict fails).
    assert all(r.passed for r in rows if r.detail.setting == 0)
    assert evaluation.verdict.verdict == "FAIL"
    # The run's table shows each estimate with its interval and the tolerance.
    lines = TREE_TV_SECTION.terminal_lines(evaluation)
    assert len(lines) == len(rows) + 2 and "simultaneous" in lines[-1]
    d = rows[0].detail
    assert f"{d.estimate:.4f} [{d.lower:.4f}, {d.upper:.4f}] vs 0.25" in lines[1]


def test_exact_setting_passes_a_tight_max_tv():
    def exact_only(model):
        return model.model_copy(update={"settings": model.settings[:1], "max_tv": 0.05})

    evaluation, _ = run_tree("tree_lossy", edit=exact_only)
    assert evaluation.verdict.verdict == "PASS"
