"""The distribution evaluator on samples from exact synthetic laws (specconform.calibration):
every test type passes on the exact law and fails on a wrong sampler (negative controls).

All data is drawn from fixed seeds, so every outcome is deterministic; the comments at
each threshold state the alpha and the power that make the outcome the expected one.
"""

import io
import json

import numpy as np
import pandas as pd
import pytest

from specconform.calibration import simulate
from specconform.kinds.distribution import evaluate, evaluate_frames
from specconform.results import RawData
from tests.toolkit.synthetic import PROTOCOL

ALPHA = PROTOCOL["alpha"]  # 0.01 throughout


# world, ref: tests/toolkit/conftest.py.


def _rows(ev):
    return {r.test: r for r in ev.tests}


def _run(world, ref, n_seeds=5000, seed=1, mutant=None, protocol=PROTOCOL):
    samples = simulate(
        world, n_seeds, np.random.default_rng(seed), mutant=mutant, groups=protocol["groups"]
    )
    return _rows(evaluate_frames(protocol, samples, ref)), samples


def test_exact_law_passes_everything(world, ref):
    # Exact-law samples: each test rejects with probability ~alpha = 0.01; this fixed seed
    # is one of the ~80 % of draws where none of the 21 alpha-level rows rejects.
    rows, _ = _run(world, ref)
    for name, row in rows.items():
        if row.role != "exploratory":
            assert row.passed, (name, row.pvalue)
    assert rows["t3_async"].passed is None and rows["t3_async"].pvalue is not None
    assert rows["out_of_support"].statistic == 0


def test_verdict_rule_and_rows(world, ref):
    samples = simulate(world, 5000, np.random.default_rng(1))
    ev = evaluate_frames(PROTOCOL, samples, world.reference)  # dict reference also accepted
    assert ev.verdict.verdict == "PASS" and ev.verdict.failed == ()
    # PROTOCOL states no `verdict`: Holm over the 4 deciding p-values at its alpha.
    assert ev.verdict.statement.startswith("false-fail rate ≤ 0.01 over 4 tests (Holm)")
    assert ev.verdict.rule.startswith(
        "PASS iff every prerequisite/primary test has evidence and p_Holm >= 0.01 (4 tests)"
    )
    names = [r.test for r in ev.tests]
    assert names == [t["name"] for t in PROTOCOL["tests"]] + [
        "coverage",
        "out_of_support",
        "engine_errors",
    ]
    json.dumps([r.to_json() for r in ev.tests])  # every detail is plain JSON


def test_evaluate_reads_raw_files(world, ref):
    samples = simulate(world, 2000, np.random.default_rng(3))
    buf = io.StringIO()
    samples.to_csv(buf, index=False)
    raw = RawData(
        {
            "raw/samples.csv": buf.getvalue().encode(),
            "raw/reference.json": json.dumps(world.reference).encode(),
        }
    )
    a = evaluate(PROTOCOL, raw)
    b = evaluate_frames(PROTOCOL, samples, ref)
    assert [r.to_json() for r in a.tests] == [r.to_json() for r in b.tests]


def test_stratified_detail_has_counts_for_plots(world, ref):
    rows, _ = _run(world, ref)
    row = rows["t2_async"]
    stratum = row.detail.strata[0]
    assert {
        "t1",
        "n",
        "statistic",
        "df",
        "pvalue",
        "pooled",
        "tokens",
        "observed",
        "expected",
    } <= set(stratum.to_json())
    assert sum(stratum.observed) == stratum.n >= PROTOCOL["strata"]["min_samples"]
    assert sum(stratum.expected) == pytest.approx(stratum.n)
    assert row.df == sum(s.df for s in row.detail.strata)
    assert row.statistic == pytest.approx(sum(s.statistic for s in row.detail.strata))
    cov = rows["coverage"].detail.tests["t2_async"]
    assert cov.strata == len(row.detail.strata) and 0 < cov.share <= 1


def test_t1_groups_are_combined_by_bonferroni(world, ref):
    rows, _ = _run(world, ref)
    row = rows["t1_speculative"]
    ps = [g.pvalue for g in row.detail.per_group]
    assert len(ps) == 4 and row.pvalue == pytest.approx(min(1.0, 4 * min(ps)))
    assert "Bonferroni" in row.detail.combination
    # A combined p has no single statistic: each group's own is in per_group.
    assert row.statistic is None and row.df is None
    assert row.pvalue_method == "Bonferroni over 4 groups"
    assert all(g.statistic is not None and g.df > 0 for g in row.detail.per_group)


def test_t1_fails_on_wrong_law(world, ref):
    # Reference t1 law at temperature 1/1.3 vs samples at 1: the effect per sample is large
    # (noncentrality ~ several units per 100 samples), power ~1 at 5,000 samples, alpha 0.01.
    bad = json.loads(json.dumps(world.reference))
    w = {k: v**1.3 for k, v in bad["p_t1"].items()}
    bad["p_t1"] = {k: v / sum(w.values()) for k, v in w.items()}
    samples = simulate(world, 5000, np.random.default_rng(1))
    rows = _rows(evaluate_frames(PROTOCOL, samples, bad))
    assert rows["t1_nospec"].passed is False and rows["t1_speculative"].passed is False


def test_t2_gof_and_homogeneity_fail_on_wrong_target(world, ref):
    # Target built at temperature 0.8 in every speculative group: noncentrality ~200 summed
    # over the strata of 5,000 seeds (~80 df) -> power ~1 at alpha 0.01 (0.9 gives ~40:
    # power only ~0.6, which is why this control uses 0.8).
    rows, _ = _run(world, ref, mutant="target_temperature")
    assert rows["t2_async"].passed is False
    assert rows["t2_async_vs_nospec"].passed is False
    assert rows["t2_async_vs_sync"].passed is True  # same bug on both sides: homogeneous


def test_t3_and_support_fail_on_bonus_off_by_one(world, ref):
    # t3 from the previous position's law: tokens outside p_t3's support appear at once.
    rows, _ = _run(world, ref, mutant="bonus_off_by_one")
    assert rows["out_of_support"].passed is False
    assert rows["out_of_support"].detail.per_group["async"].t3 > 0
    assert rows["t3_async"].pvalue < ALPHA  # exploratory: reported, never decides


def test_q_one_hot_is_a_mechanism_failure_only(world, ref):
    # Law exact, acceptance lowered from 1 - TV to E_q[p]: a rejection-rate shift of ~0.5
    # on >1,000 samples per stratum -> power ~1 for acceptance at alpha 0.01; the t2 tests
    # see the exact law (reject w.p. ~alpha; this seed: none).
    rows, samples = _run(world, ref, mutant="q_one_hot")
    for g in ("sync", "async", "sync_d1", "async_d1"):
        assert rows[f"acceptance_{g}"].passed is False
        assert rows[f"joint_{g}"].passed is False
    for name in ("t1_nospec", "t1_speculative", "t2_async", "t2_async_vs_nospec"):
        assert rows[name].passed is True
    ev = evaluate_frames(PROTOCOL, samples, ref)
    assert ev.verdict.verdict == "PASS"  # a mechanism failure, not a distribution failure
    st = rows["acceptance_async"].detail.strata[0]
    assert st.observed_rejection_rate > st.expected_rejection_rate + 0.2


def test_acceptance_detail_reports_tv_and_rates(world, ref):
    rows, _ = _run(world, ref)
    row = rows["acceptance_async"]
    assert 0 < row.detail.mean_accepted_per_drafted <= 1
    for st in row.detail.strata:
        p = world.reference["p_t2"][str(st.t1)]
        q = world.reference["q_t2"]["2"][str(st.t1)]
        tv = 0.5 * sum(abs(p.get(k, 0) - q.get(k, 0)) for k in set(p) | set(q))
        assert st.tv == pytest.approx(tv)
        assert 0 <= st.binom_pvalue <= 1
        assert st.chi2_df == 1  # both cells dense: reported beside, never decides
    # The decision is the exact binomial, Bonferroni over the strata.
    m = len(row.detail.strata)
    assert row.df is None and row.pvalue_method.startswith("exact binomial")
    assert row.pvalue == pytest.approx(min(1.0, m * min(s.binom_pvalue for s in row.detail.strata)))


def test_residual_from_p_caught_by_joint_not_t2(world, ref):
    # 800 seeds: one stratum of ~260 samples. The t2 marginal moves by ~0.023 noncentrality
    # per sample (lambda ~6 on ~12 df: power ~0.1 at alpha 0.01), while corrections land on
    # cells where (p - q)+ = 0, which are out of support for `joint` (power ~1).
    rows, _ = _run(world, ref, n_seeds=800, seed=5, mutant="residual_from_p")
    assert rows["t2_async"].detail.strata_count >= 1
    assert rows["t2_async"].passed is True
    assert rows["joint_async"].passed is False
    assert any(s.out_of_support > 0 for s in rows["joint_async"].detail.strata)


def test_out_of_support_observation_is_fatal(world, ref):
    samples = simulate(world, 5000, np.random.default_rng(1))
    t1 = int(world.t1_tokens[np.argmax(world.p1)])
    support = {int(k) for k in world.reference["p_t2"][str(t1)]}
    outside = next(t for t in range(world.reference["vocab_size"]) if t not in support)
    hit = samples.index[(samples["group"] == "async") & (samples["t1"] == t1)][0]
    samples.loc[hit, ["t2", "t3"]] = [outside, -1]
    rows = _rows(evaluate_frames(PROTOCOL, samples, ref))
    assert rows["out_of_support"].statistic == 1 and rows["out_of_support"].passed is False
    assert rows["t2_async"].passed is False and rows["t2_async"].pvalue == 0.0
    ev = evaluate_frames(PROTOCOL, samples, ref)
    assert ev.verdict.verdict == "FAIL" and "out_of_support" in ev.verdict.failed


def test_out_of_range_token_is_out_of_support(world, ref):
    samples = simulate(world, 1000, np.random.default_rng(1))
    samples.loc[samples.index[samples["group"] == "nospec"][0], "t3"] = 10**6
    rows = _rows(evaluate_frames(PROTOCOL, samples, ref))
    assert rows["out_of_support"].detail.per_group["nospec"].t3 == 1


def test_overlapping_seeds_split_even_odd(world, ref):
    rows, samples = _run(world, ref)
    row = rows["t2_async_vs_sync"]  # same seeds: sync and async samples are identical
    assert "even seeds" in row.detail.seed_split
    for st in row.detail.strata:
        t1 = st.t1
        a = samples[(samples["group"] == "async") & (samples["t1"] == t1)]
        b = samples[(samples["group"] == "sync") & (samples["t1"] == t1)]
        assert st.n_a == int((a["seed"] % 2 == 0).sum())
        assert st.n_b == int((b["seed"] % 2 == 1).sum())
    disjoint = rows["t2_async_vs_nospec"]
    assert disjoint.detail.seed_split.startswith("seed sets disjoint")
    assert disjoint.n == sum(s.n_a + s.n_b for s in disjoint.detail.strata)


def test_test_without_strata_does_not_pass(world, ref):
    # 100 seeds: no t1 reaches 200 samples; no evidence must not read as a pass.
    rows, _ = _run(world, ref, n_seeds=100)
    assert rows["t2_async"].passed is False and rows["t2_async"].pvalue is None
    assert rows["t2_async"].status == "NO_EVIDENCE" and rows["t2_async"].reason == "no evidence"
    assert rows["t3_async"].passed is None and rows["t3_async"].status == "NO_EVIDENCE"


def test_missing_reference_law_is_an_error(world, ref):
    samples = simulate(world, 2000, np.random.default_rng(1))
    bad = json.loads(json.dumps(world.reference))
    top = str(int(world.t1_tokens[np.argmax(world.p1)]))
    del bad["p_t2"][top]
    with pytest.raises(ValueError, match="p_t2"):
        evaluate_frames(PROTOCOL, samples, bad)


def test_empty_group_frame(world, ref):
    samples = simulate(world, 2000, np.random.default_rng(1))
    samples = samples[samples["group"] != "sync"]
    rows = _rows(evaluate_frames(PROTOCOL, pd.DataFrame(samples), ref))
    assert rows["t2_sync"].passed is False and rows["t2_sync"].n == 0


def test_impossible_prefix_without_reference_is_skipped_not_crashed(world, ref):
    samples = simulate(world, 5000, np.random.default_rng(1))
    impossible = next(
        t for t in range(world.reference["vocab_size"]) if str(t) not in world.reference["p_t1"]
    )
    rows_async = samples.index[samples["group"] == "async"][:300]
    samples.loc[rows_async, "t1"] = impossible
    rows = _rows(evaluate_frames(PROTOCOL, samples, ref))
    assert rows["out_of_support"].detail.per_group["async"].t1 == 300
    assert rows["t2_async"].detail.skipped_impossible_strata == ({"t1": impossible},)
    assert rows["joint_async"].detail.skipped_impossible_strata == ({"t1": impossible},)
