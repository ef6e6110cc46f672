"""Family-wise verdicts (Holm / Bonferroni), no evidence, and engine errors as evidence.

Unit cases use hand-built rows; the protocol-level cases run the distribution evaluator
on samples from the exact synthetic laws of specconform.calibration (fixed seeds, so
every outcome is deterministic; each threshold's comment states alpha and power).
"""

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from specconform.calibration import simulate
from specconform.kinds.distribution import evaluate_frames
from specconform.kinds.verdict import FamilyRule, family_verdict
from specconform.results import TestRow
from specconform.stats.aggregate import adjust
from tests.toolkit.synthetic import PROTOCOL


def _row(name, p, role="primary", status=None):
    passed = None if role == "exploratory" else (p is not None and p >= 0.01)
    return TestRow(
        name,
        role,
        1.0,
        1.0,
        p,
        100,
        0.01,
        passed,
        status=status or ("" if p is not None else "NO_EVIDENCE"),
    )


def test_adjust_matches_statsmodels_and_hand_holm():
    ps = [0.01, 0.04, 0.03, 0.2]
    # Holm by hand: sorted 0.01, 0.03, 0.04, 0.2 -> 4*0.01, max(.04, 3*.03), max(.09, 2*.04), .2
    assert adjust(ps, "holm") == pytest.approx((0.04, 0.09, 0.09, 0.2))
    assert adjust(ps, "bonferroni") == pytest.approx((0.04, 0.16, 0.12, 0.8))
    assert adjust(ps, "holm") == pytest.approx(tuple(multipletests(ps, method="holm")[1]))
    with pytest.raises(ValueError, match="unknown combination"):
        adjust(ps, "fisher")
    with pytest.raises(ValueError, match="finite"):
        adjust([0.1, float("nan")], "holm")


def test_holm_verdict_states_its_rate_and_keeps_raw_p():
    # Each p >= 0.01 on its own would pass the old per-test rule; Holm over 4 fails the
    # smallest (4 * 0.004 = 0.016 >= 0.01 passes; 4 * 0.002 = 0.008 fails).
    rows = [
        _row("a", 0.002),
        _row("b", 0.5),
        _row("c", 0.3, role="prerequisite"),
        _row("d", 0.9),
        _row("e", 0.001, role="secondary"),
    ]
    out, verdict = family_verdict(rows, FamilyRule(("prerequisite", "primary"), "holm", 0.01))
    by = {r.test: r for r in out}
    assert verdict.verdict == "FAIL" and verdict.failed == ("a",)
    assert verdict.statement == "false-fail rate ≤ 0.01 over 4 tests (Holm)"
    assert dict(verdict.reasons) == {"a": "p_Holm < 0.01"}
    assert by["a"].pvalue == 0.002 and by["a"].adjusted_pvalue == pytest.approx(0.008)
    assert by["a"].status == "FAIL" and by["a"].deciding
    # A secondary row keeps its own per-test level, never decides, and is not adjusted.
    assert by["e"].status == "FAIL" and not by["e"].deciding and by["e"].adjusted_pvalue is None
    rows[0] = _row("a", 0.004)
    _, verdict = family_verdict(rows, FamilyRule(("prerequisite", "primary"), "holm", 0.01))
    assert verdict.verdict == "PASS"


def test_no_evidence_makes_a_deciding_role_inconclusive_and_deterministic_rows_do_not_count():
    support = TestRow("out_of_support", "primary", 0.0, None, None, 10, 0.01, True)
    rows = [_row("a", 0.5), _row("b", None), support]
    out, verdict = family_verdict(rows, FamilyRule(("primary",), "bonferroni", 0.05))
    assert verdict.verdict == "INCONCLUSIVE" and dict(verdict.reasons) == {"b": "no evidence"}
    assert verdict.failed == () and verdict.inconclusive == ("b",)
    assert verdict.family_size == 1  # only "a" has a p-value
    assert verdict.statement.startswith("false-fail rate ≤ 0.05 over 1 tests (Bonf)")
    assert "out_of_support" in verdict.statement
    assert {r.test: r.status for r in out} == {
        "a": "PASS",
        "b": "NO_EVIDENCE",
        "out_of_support": "PASS",
    }


# --- the distribution kind under the family-wise rule ------------------------------------


# world, ref: tests/toolkit/conftest.py.


def _protocol(**extra):
    return {
        **PROTOCOL,
        "seeds": {"count": 2000, "offset": 0},
        "engine": {"batch_size": 500},
        **extra,
    }


def test_exact_law_passes_with_holm_and_wrong_sampler_fails(world, ref):
    protocol = _protocol(verdict={"combine": "holm", "alpha": 0.01})
    samples = simulate(world, 5000, np.random.default_rng(1))
    ev = evaluate_frames(protocol, samples, ref)
    assert ev.verdict.verdict == "PASS" and ev.verdict.combine == "holm"
    assert ev.verdict.statement.startswith("false-fail rate ≤ 0.01 over 4 tests (Holm)")
    # Negative control: target built at temperature 0.8 (t2 noncentrality ~200 over ~80 df
    # at 5,000 seeds: power ~1 even at the Holm level 0.01/4).
    bad = simulate(world, 5000, np.random.default_rng(1), mutant="target_temperature")
    ev = evaluate_frames(protocol, bad, ref)
    reasons = dict(ev.verdict.reasons)
    assert ev.verdict.verdict == "FAIL" and reasons["t2_async"] == "p_Holm < 0.01"
    row = next(r for r in ev.tests if r.test == "t2_async")
    assert row.adjusted_pvalue >= row.pvalue and row.status == "FAIL"


def test_homogeneity_with_df_zero_reads_no_evidence(world, ref):
    # A sampler that always commits one t2 token: every stratum of async vs sync pools to
    # one column (df 0). That is no evidence, never PASS; in a deciding role it fails.
    samples = simulate(world, 2000, np.random.default_rng(2))
    spec = samples["group"].isin(["async", "sync"])
    samples.loc[spec, "t2"] = int(world.u_tokens[0, 0])
    ev = evaluate_frames(_protocol(), samples, ref)
    row = next(r for r in ev.tests if r.test == "t2_async_vs_sync")
    assert row.df == 0 and row.status == "NO_EVIDENCE" and row.pvalue is None
    assert row.passed is False and not row.deciding  # secondary: shown, does not decide
    deciding = [
        {**t, "role": "primary"} if t["name"] == "t2_async_vs_sync" else t
        for t in PROTOCOL["tests"]
    ]
    ev = evaluate_frames(_protocol(tests=deciding), samples, ref)
    assert dict(ev.verdict.reasons)["t2_async_vs_sync"] == "no evidence"


def test_engine_errors_fail_the_verdict_by_their_own_reason(world, ref):
    samples = simulate(world, 2000, np.random.default_rng(1))
    ev = evaluate_frames(_protocol(), samples, ref)
    errors = next(r for r in ev.tests if r.test == "engine_errors")
    assert errors.status == "PASS" and errors.statistic == 0
    # Two requests of the async group end in an engine error: seeds 3 (batch 0) and 1203
    # (batch 2 of 500). Everything else is exact, so only engine_errors fails.
    at = samples.index[(samples["group"] == "async") & samples["seed"].isin([3, 1203])]
    samples.loc[at, "finish_reason"] = "error"
    ev = evaluate_frames(_protocol(), samples, ref)
    row = next(r for r in ev.tests if r.test == "engine_errors")
    assert row.status == "FAIL" and row.statistic == 2
    assert row.detail.per_group["async"] == 2
    assert row.detail.per_batch["async"] == {"0": 1, "2": 1}
    assert ev.verdict.verdict == "FAIL" and dict(ev.verdict.reasons) == {
        "engine_errors": "engine errors"
    }
    # A pre-registered tolerance of 2 per deciding group admits them.
    ev = evaluate_frames(_protocol(engine_errors={"tolerance": 2}), samples, ref)
    assert ev.verdict.verdict == "PASS"
    # Errors in a group no deciding test reads are shown but do not fail the verdict
    # (with primaries deciding alone, sync_d1 is read by secondary tests only).
    samples.loc[at, "finish_reason"] = "length"
    only = samples.index[(samples["group"] == "sync_d1") & (samples["seed"] == 7)]
    samples.loc[only, "finish_reason"] = "error"
    ev = evaluate_frames(_protocol(decision_roles=["primary"]), samples, ref)
    row = next(r for r in ev.tests if r.test == "engine_errors")
    assert row.status == "PASS" and row.detail.per_group["sync_d1"] == 1
    assert ev.verdict.verdict == "PASS"


def test_samples_without_finish_reason_are_no_evidence_for_engine_errors(world, ref):
    samples = simulate(world, 2000, np.random.default_rng(1)).drop(columns="finish_reason")
    ev = evaluate_frames(_protocol(), samples, ref)
    assert dict(ev.verdict.reasons) == {"engine_errors": "no evidence"}


def test_tests_csv_states_status_and_adjusted_p_and_json_round_trips():
    from specconform.evidence.results_io import read_tests_csv, tests_csv_bytes

    rows, verdict = family_verdict(
        [_row("a", 0.002), _row("b", None), _row("c", 0.5)], FamilyRule(("primary",), "holm", 0.01)
    )
    parsed = {r["test"]: r for r in read_tests_csv(tests_csv_bytes(rows))}
    assert parsed["a"]["status"] == "FAIL"
    assert parsed["a"]["adjusted_pvalue"] == pytest.approx(0.004)
    assert parsed["b"]["status"] == "NO_EVIDENCE" and parsed["b"]["passed"] is False
    back = [TestRow.from_json(r.to_json()) for r in rows]
    assert back == list(rows)
    from specconform.results import Verdict

    assert Verdict.from_json(verdict.to_json()) == verdict


def test_the_family_runs_at_alpha_less_the_numerics_reserve():
    """An adjusted p between the family level and the stated alpha FAILs without a
    reserve and PASSes with one (the family's level is lower); the verdict states alpha
    and says what the reserve is for."""
    rows = [_row("a", 0.0035), _row("b", 0.5)]  # Holm: a -> 0.007
    _, plain = family_verdict(rows, FamilyRule(("primary",), "holm", 0.01))
    decided, reserved = family_verdict(rows, FamilyRule(("primary",), "holm", 0.01, 0.005))
    assert plain.verdict == "FAIL" and reserved.verdict == "PASS"
    assert decided[0].alpha == pytest.approx(0.005) and reserved.alpha == 0.01
    assert "Holm at 0.005 over 2 tests, 0.005 reserved for real numerics" in reserved.statement


@pytest.mark.parametrize(
    "mutant, must_fail",
    [
        # Corrections drawn from p land where (p - q)+ = 0: out of support for the joint
        # cells (p = 0 exactly), caught with certainty at any level.
        ("residual_from_p", "joint_async"),
        # Law exact, acceptance lowered from 1 - TV to E_q[p]: a rejection-rate shift ~0.5 on
        # >400 samples per stratum, exact binomial p < 1e-10 << 0.005 / 10 (Holm's first
        # step at the family level: alpha 0.01 less the numerics reserve 0.005).
        ("q_one_hot", "acceptance_async"),
    ],
)
def test_shipped_ci_gate_fails_wrong_samplers_under_holm(world, ref, mutant, must_fail):
    from specconform.protocol.load import load_protocol
    from tests.toolkit.fixtures.distribution_run import ROOT

    protocol = load_protocol(ROOT / "protocols" / "ci_gate.yaml").data
    samples = simulate(
        world, 2000, np.random.default_rng(4), mutant=mutant, groups=protocol["groups"]
    )
    ev = evaluate_frames(protocol, samples, ref)
    assert ev.verdict.verdict == "FAIL" and must_fail in ev.verdict.failed
    assert dict(ev.verdict.reasons)[must_fail] == "p_Holm < 0.005"
    assert ev.verdict.alpha == 0.01  # the stated rate: the family level plus the reserve
