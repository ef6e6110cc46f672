"""The mechanism PIT (``mechanism_pit``) and the mechanism-out-of-support rule of the
sequence evaluator, on frames of the numpy speculative sampler
(specconform/calibration/sequence_synthetic.py) at the shipped protocols/ci_sequence.yaml layout.

Sizes (docs/calibration.md, "Sequence kind", 1,000 null and 200 bug replications): the
verdict is Holm over the protocol's 9 stochastic tests at family-wise α = 0.01, so a
clean run fails with probability <= 0.01, and each mechanism_pit row alone at α = 0.01
likewise. The negative controls' kill rates at this layout are in the power table
there: residual_from_p, draft_raw_q and late_round_residual are killed by the
mechanism-out-of-support rule (corrections drawn from p land where q > p: hundreds per
run, deterministic given one), shared_uniform by the mechanism χ² of the corrections.
Seeds are fixed, so every outcome here is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from specconform.calibration.sequence_synthetic import simulate
from specconform.details.sequence import Offender
from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.mechanism import PREDATES
from specconform.kinds.sequence.raw import MECH_COLUMNS
from specconform.protocol.load import load_protocol
from specconform.protocol.schema_sequence import SequenceProtocol
from specconform.results import FAIL, NO_EVIDENCE, PASS
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.fixtures.sequence_run import PROTOCOL_PATH

MECHANISM = ("mechanism_async", "mechanism_sync_d1")


@pytest.fixture(scope="module")
def protocol() -> dict:
    return load_protocol(ROOT / "protocols" / "ci_sequence.yaml").data


@pytest.fixture(scope="module")
def clean(protocol):
    return simulate(protocol, 1)


def _rows(evaluation) -> dict:
    return {r.test: r for r in evaluation.tests}


def _with_test(protocol: dict, **spec) -> dict:
    base = {"name": "mech_extra", "type": "mechanism_pit", "role": "mechanism"}
    return {**protocol, "tests": [*protocol["tests"], {**base, **spec}]}


def test_clean_run_passes_the_mechanism_tests(protocol, clean):
    ev = evaluate_frames(protocol, *clean)
    rows = _rows(ev)
    assert ev.verdict.verdict == "PASS", ev.verdict.reasons
    # 10 tests + crossing_async + request_rounds_async + the grid's pit, acceptance and
    # mechanism tests (issue 35) + bonus_accept (issue 35, random streams)
    assert ev.verdict.family_size == 16
    mean = rows["mechanism_mean"]
    assert mean.status == PASS and mean.deciding and mean.df == 2
    assert all(g.tested and g.law == "correction" for g in mean.detail.per_group)
    for name in MECHANISM:
        row = rows[name]
        assert row.status == PASS and row.deciding and row.df > 0
        laws = {s.law for s in row.detail.strata}
        assert laws == {"correction", "accepted"}
        # Every drafted random token with a q is tested; none is fatal or a boundary.
        for c in row.detail.counts:
            assert c.eligible == c.tokens > 0 and c.boundary == c.out_of_support == 0
        assert row.n == sum(c.eligible for c in row.detail.counts)
    assert rows["out_of_support"].detail.mechanism_per_group["async_mixed"] == 0


def test_greedy_requests_stay_out_of_the_mechanism_pit(protocol, clean):
    requests, tokens, _ = clean
    row = _rows(evaluate_frames(protocol, *clean))["mechanism_async"]
    greedy = requests.loc[(requests["temperature"] == 0) & (requests["group"] == "async_mixed")]
    drafted = tokens[
        (tokens["group"] == "async_mixed") & tokens["kind"].isin(["accepted", "correction"])
    ]
    random = ~drafted["request"].isin(greedy["request"])
    assert row.n == int(random.sum()) < len(drafted)


@pytest.mark.parametrize("mutant", ["residual_from_p", "draft_raw_q", "late_round_residual"])
def test_residual_bugs_are_killed_by_the_mechanism_support_rule(protocol, mutant):
    ev = evaluate_frames(protocol, *simulate(protocol, 1, mutant))
    row = _rows(ev)["out_of_support"]
    assert ev.verdict.verdict == "FAIL" and row.status == FAIL
    assert row.reason == "mechanism out of support"
    assert row.detail.mechanism_per_group["async_mixed"] > 0
    assert "async_mixed" in row.detail.mechanism_first
    # The marginal rule alone sees nothing: the committed tokens all have p > 0.
    assert sum(row.detail.per_group.values()) == 0


def test_a_reused_coin_is_killed_by_the_mechanism_chi2(protocol):
    # shared_uniform: the correction reuses the coin that rejected the draft, so its
    # support stays the residual's (no fatal token) but its law does not; the accepted
    # drafts are untouched, so an accepted-only mechanism test is a null test here
    # (false-fail probability 0.01; it passes at this seed).
    proto = _with_test(protocol, law="accepted", groups=["async_mixed"])
    proto = _with_test(proto, name="mech_corr", law="correction", groups=["async_mixed"])
    rows = _rows(evaluate_frames(proto, *simulate(protocol, 1, "shared_uniform")))
    assert rows["out_of_support"].status == PASS
    for name in (*MECHANISM, "mech_corr"):
        assert rows[name].status == FAIL and rows[name].pvalue < 1e-10, name
    assert rows["mech_extra"].status == PASS
    assert {s.law for s in rows["mech_corr"].detail.strata} == {"correction"}


def test_a_reused_coin_shifts_the_corrections_mean_pit_up(protocol):
    # mechanism_mean is the 1-df test for this bug: a rejection leaves the reused coin
    # in [p/q, 1), so the correction lands high in its CDF (z > 0 in every group). Its
    # power at this layout is 1.00 over 200 replications (docs/calibration.md), against
    # a size of 0.01 per row; the seed is fixed.
    rows = _rows(evaluate_frames(protocol, *simulate(protocol, 1, "shared_uniform")))
    mean = rows["mechanism_mean"]
    assert mean.status == FAIL and mean.pvalue < 1e-6
    assert all(g.z > 3 for g in mean.detail.per_group)
    # The accepted drafts keep their law: the same statistic on them is a null test.
    proto = _with_test(protocol, type="mechanism_mean", law="accepted")
    extra = _rows(evaluate_frames(proto, *simulate(protocol, 1, "shared_uniform")))
    assert extra["mech_extra"].status == PASS


def test_mechanism_mean_without_enough_corrections_is_no_evidence(protocol, clean):
    proto = _with_test(protocol, type="mechanism_mean", min_samples=10**6)
    row = _rows(evaluate_frames(proto, *clean))["mech_extra"]
    assert row.status == NO_EVIDENCE and "no group has 1000000" in row.reason


def test_an_archive_without_the_columns_reads_no_evidence(protocol, clean):
    requests, tokens, checks = clean
    old = tokens.drop(columns=list(MECH_COLUMNS))
    ev = evaluate_frames(protocol, requests, old, checks)
    rows = _rows(ev)
    for name in (*MECHANISM, "mechanism_mean"):
        assert rows[name].status == NO_EVIDENCE and rows[name].passed is False
        assert rows[name].reason == f"no evidence: {PREDATES}"
    assert ev.verdict.verdict == "INCONCLUSIVE"  # a deciding row without evidence
    assert rows["out_of_support"].detail.mechanism_per_group is None


def test_old_protocols_recompute_identically_with_or_without_the_columns():
    # The frozen pre-mechanism copy of ci_sequence: the new columns change nothing
    # (the V_t stream is the same; the W_t stream is separate).
    old_protocol = load_protocol(PROTOCOL_PATH).data
    requests, tokens, checks = simulate(old_protocol, 2)
    with_cols = _rows(evaluate_frames(old_protocol, requests, tokens, checks))
    without = _rows(
        evaluate_frames(old_protocol, requests, tokens.drop(columns=list(MECH_COLUMNS)), checks)
    )
    assert with_cols.keys() == without.keys()
    for name, row in with_cols.items():
        assert (row.statistic, row.pvalue, row.status) == (
            without[name].statistic,
            without[name].pvalue,
            without[name].status,
        ), name


def _a_correction(tokens) -> int:
    rows = np.flatnonzero(
        (tokens["kind"] == "correction").to_numpy() & (tokens["group"] == "async_mixed").to_numpy()
    )
    return int(rows[0])


def test_a_boundary_correction_is_left_out_not_fatal(protocol, clean):
    requests, tokens, checks = clean
    edited = tokens.copy()
    i = _a_correction(edited)
    edited.loc[i, list(MECH_COLUMNS)] = np.nan  # what the runner writes within tolerance
    rows = _rows(evaluate_frames(protocol, requests, edited, checks))
    counts = {c.law: c for c in rows["mechanism_async"].detail.counts}
    assert counts["correction"].boundary == 1
    assert counts["correction"].eligible == counts["correction"].tokens - 1
    assert rows["mechanism_async"].status == PASS and rows["out_of_support"].status == PASS


def test_a_mechanism_zero_is_fatal(protocol, clean):
    requests, tokens, checks = clean
    edited = tokens.copy()
    i = _a_correction(edited)
    edited.loc[i, list(MECH_COLUMNS)] = 0.0  # beyond tolerance: r(x) = 0
    ev = evaluate_frames(protocol, requests, edited, checks)
    row = _rows(ev)["out_of_support"]
    assert ev.verdict.verdict == "FAIL" and row.reason == "mechanism out of support"
    assert row.statistic == 1.0
    assert row.detail.mechanism_first["async_mixed"] == Offender(
        request=int(edited.loc[i, "request"]), step=int(edited.loc[i, "step"])
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t, i: t.drop(columns=["mech_p_token"]), "without the rest"),
        (
            lambda t, i: t.assign(mech_p_token=np.where(t.index == i, np.nan, t["mech_p_token"])),
            "empty",
        ),
        (lambda t, i: t.assign(mech_p_token=t["mech_p_token"] + 1.0), "probabilities"),
        (lambda t, i: t.assign(mech_p_token=0.5, mech_cdf_below=0.1), "drafted"),
    ],
)
def test_mechanism_columns_that_do_not_fit_are_refused(protocol, clean, edit, message):
    requests, tokens, checks = clean
    with pytest.raises(ValueError, match=message):
        evaluate_frames(protocol, requests, edit(tokens, _a_correction(tokens)), checks)


def test_the_schema_places_the_mechanism_fields():
    data = load_protocol(ROOT / "protocols" / "ci_sequence.yaml").data
    bad_law = _with_test(data, type="acceptance_all", law="correction")
    with pytest.raises(ValueError, match="mechanism_pit and mechanism_mean only"):
        SequenceProtocol.model_validate(bad_law)
    with pytest.raises(ValueError, match="mechanism_mean has no bins"):
        SequenceProtocol.model_validate(_with_test(data, type="mechanism_mean", bins=5))
    nospec = _with_test(data, groups=["nospec_greedy"])
    with pytest.raises(ValueError, match="speculative groups"):
        SequenceProtocol.model_validate(nospec)
    ok = _with_test(data, law="accepted", bins=5, min_samples=20, groups=["sync_d1"])
    SequenceProtocol.model_validate(ok)
