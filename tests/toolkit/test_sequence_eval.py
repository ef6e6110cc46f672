"""The sequence evaluator on frames from the numpy speculative sampler
(specconform/calibration/sequence_synthetic.py): the ci_sequence layout (a frozen copy,
tests/toolkit/fixtures/sequence_protocol.yaml) passes on exact laws and fails on each
planted bug.

Sizes: the verdict is Holm over the protocol's 7 stochastic tests at family-wise
α = 0.01, so a clean run fails with probability <= 0.01 (docs/calibration.md,
"Sequence kind", measures it); the seeds are fixed, so every outcome here is
deterministic. Each negative control's power at this size is in the power table of
docs/calibration.md (kill rate over 200 replications)."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pandas as pd
import pytest

from specconform.calibration.sequence_synthetic import simulate
from specconform.details.sequence import Offender
from specconform.kinds import reevaluate
from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.raw import CHECKS, REQUESTS, TOKENS
from specconform.protocol.load import load_protocol
from specconform.protocol.schema_sequence import SequenceProtocol
from specconform.results import FAIL, INFO, NO_EVIDENCE, PASS, RawData
from tests.toolkit.fixtures.sequence_run import PROTOCOL_PATH


@pytest.fixture(scope="module")
def protocol() -> dict:
    return load_protocol(PROTOCOL_PATH).data


@pytest.fixture(scope="module")
def clean(protocol):
    return simulate(protocol, 1)


def _rows(evaluation) -> dict:
    return {r.test: r for r in evaluation.tests}


def test_clean_run_passes_every_test(protocol, clean):
    ev = evaluate_frames(protocol, *clean)
    rows = _rows(ev)
    assert ev.verdict.verdict == "PASS", ev.verdict.reasons
    assert ev.verdict.family_size == 7
    for name in ("pit_async", "pit_sync_d1", "lag1_async", "rounds_async", "requests_async"):
        assert rows[name].status == PASS and rows[name].deciding
        assert rows[name].df > 0 and rows[name].adjusted_pvalue is not None
    for name in ("oracle", "trace_async", "greedy_async"):
        assert rows[name].status == PASS and rows[name].pvalue is None
    assert rows["coverage"].status == INFO and rows["coverage"].statistic == 1.0
    assert rows["out_of_support"].status == PASS and rows["engine_errors"].status == PASS


def test_greedy_requests_stay_out_of_the_u_statistics(protocol, clean):
    requests, tokens, _ = clean
    rows = _rows(evaluate_frames(protocol, *clean))
    greedy = requests.loc[requests["temperature"] == 0, ["group", "request"]]
    key = set(map(tuple, greedy.to_numpy().tolist()))
    mixed = tokens[tokens["group"] == "async_mixed"]
    is_greedy = [(g, r) in key for g, r in zip(mixed["group"], mixed["request"], strict=True)]
    random = int((~np.array(is_greedy)).sum())
    assert rows["pit_async"].n == random < len(mixed)
    # The greedy groups hold no random token: a uniformity test on them is no evidence.
    spec = {
        "name": "pit_greedy",
        "type": "pit_uniformity",
        "role": "primary",
        "groups": ["async_greedy"],
    }
    proto = {**protocol, "tests": [*protocol["tests"], spec]}
    row = _rows(evaluate_frames(proto, *clean))["pit_greedy"]
    assert row.status == NO_EVIDENCE and row.reason == "no evidence"


def test_strata_are_slots_and_round_bands_never_accept_versus_correct(protocol, clean):
    row = _rows(evaluate_frames(protocol, *clean))["pit_async"]
    slots = {s.slot for s in row.detail.strata}
    assert slots == {"target", "draft_0", "draft_1", "draft_2", "bonus"}  # K = 3
    assert row.df == row.detail.strata_count * (protocol["strata"]["bins"] - 1)
    assert all(s.n >= protocol["strata"]["min_samples"] for s in row.detail.strata)


def test_wrong_law_at_draft_position_1_fails_uniformity(protocol):
    # The engine's p at position 1 is p^(1/0.7) (the reported p stays right): at this
    # layout pit_sync_d1 FAILs in 159/200 replications (99% CI [0.71, 0.86]) and the
    # verdict in 200/200 (docs/calibration.md, power table); this seed fails both.
    ev = evaluate_frames(protocol, *simulate(protocol, 1, "tempered_position1"))
    rows = _rows(ev)
    assert rows["pit_sync_d1"].status == FAIL
    assert ev.verdict.verdict == "FAIL"


def test_uniforms_reused_across_rounds_fail_rounds_independence(protocol):
    # The same uniforms every round: U at position j of round r and r + 1 are strongly
    # dependent (χ² in the thousands; 200/200 replications FAIL, calibration table).
    # Marginal uniformity breaks too here: each request's U's cluster around its fixed
    # uniforms.
    rows = _rows(evaluate_frames(protocol, *simulate(protocol, 1, "rounds_reuse")))
    assert rows["rounds_async"].status == FAIL


def _one_law(protocol: dict) -> dict:
    """ci_sequence with async_mixed on one prompt and one sampling configuration: the
    requests 2i and 2i + 1 the requests test pairs then share their law."""
    proto = copy.deepcopy(protocol)
    group = next(g for g in proto["groups"] if g["name"] == "async_mixed")
    group["prompts"], group["sampling"] = [0], [{"temperature": 1.0}]
    return proto


def test_uniforms_shared_across_requests_fail_requests_independence(protocol):
    # Requests 2i, 2i + 1 with one law and the same uniforms commit the same tokens:
    # every pair falls on the diagonal of the 4x4 table (power ~1).
    proto = _one_law(protocol)
    rows = _rows(evaluate_frames(proto, *simulate(proto, 1, "shared_requests")))
    assert rows["requests_async"].status == FAIL
    clean = _rows(evaluate_frames(proto, *simulate(proto, 1)))
    assert clean["requests_async"].status == PASS


def _with_request_rounds(protocol: dict) -> dict:
    """The frozen layout plus ci_sequence's `request_rounds` correlation test."""
    spec = {
        "name": "request_rounds_async",
        "type": "pit_correlation",
        "pairs": "request_rounds",
        "role": "primary",
        "groups": ["async_mixed"],
    }
    return {**protocol, "tests": [*protocol["tests"], spec]}


def test_uniforms_shared_by_round_fail_round_aligned_request_pairs(protocol):
    # The mixed layout (requests 2i and 2i + 1 of different laws) with the sampler's
    # lockstep rounds sharing one block of uniforms per pair and round: acceptances
    # move the two requests' steps apart, so step-aligned pairs lose the sharing, and
    # the (round, position)-aligned pairs keep it (z about 25 here). Negative control:
    # the clean sampler passes the same test. Fixed seed; the power over 200 replications is in
    # docs/calibration.md (power table, shared_requests).
    proto = _with_request_rounds(protocol)
    shared = _rows(evaluate_frames(proto, *simulate(proto, 1, "shared_requests")))
    clean = _rows(evaluate_frames(proto, *simulate(proto, 1)))
    assert shared["request_rounds_async"].status == FAIL
    assert shared["request_rounds_async"].pvalue < 1e-6
    assert shared["request_rounds_async"].detail.z > 0  # shared uniforms: positive
    assert clean["request_rounds_async"].status == PASS
    assert clean["request_rounds_async"].n > 1000  # pairs: a test with evidence


def test_rejection_rate_off_at_position_2_fails_acceptance(protocol):
    # +0.05 rejection probability at position 2: acceptance_async FAILs in 200/200
    # replications (99% CI [0.97, 1]; calibration table); the largest z sits at j = 2.
    rows = _rows(evaluate_frames(protocol, *simulate(protocol, 1, "reject_position2")))
    assert rows["acceptance_async"].status == FAIL
    cells = rows["acceptance_async"].detail.strata[0].positions
    assert max(cells, key=lambda c: c.z).positions == (2,)


def test_an_out_of_support_token_fails_the_verdict(protocol, clean):
    requests, tokens, checks = clean
    tokens = tokens.copy()
    at = tokens.index[(tokens["group"] == "async_mixed") & (tokens["step"] == 7)][0]
    tokens.loc[at, "p_token"] = 0.0
    ev = evaluate_frames(protocol, requests, tokens, checks)
    row = _rows(ev)["out_of_support"]
    assert row.status == FAIL and row.reason == "out of support" and row.statistic == 1.0
    assert row.detail.first["async_mixed"] == Offender(
        request=int(tokens.loc[at, "request"]), step=7
    )
    assert ev.verdict.verdict == "FAIL" and "out_of_support" in ev.verdict.failed


def test_a_not_applicable_check_is_no_evidence_and_fails_the_verdict(protocol, clean):
    requests, tokens, checks = clean
    checks = copy.deepcopy(checks)
    checks["trace_async"].update(
        applicable=False, why="the adapter exposes no round laws", checked=0
    )
    ev = evaluate_frames(protocol, requests, tokens, checks)
    row = _rows(ev)["trace_async"]
    assert row.status == NO_EVIDENCE and row.passed is False
    assert row.reason == "not applicable: the adapter exposes no round laws"
    assert ev.verdict.verdict in ("FAIL", "INCONCLUSIVE") and "trace_async" not in ev.verdict.failed
    assert "trace_async" in ev.verdict.inconclusive
    assert dict(ev.verdict.reasons)["trace_async"] == row.reason


def test_a_mismatching_check_fails_naming_the_first_mismatch(protocol, clean):
    requests, tokens, checks = clean
    checks = copy.deepcopy(checks)
    example = {"request": 3, "step": 17, "token": 5, "abs_diff": 0.02}
    checks["oracle"].update(mismatches=2, max_abs_diff=0.02, examples=[example])
    row = _rows(evaluate_frames(protocol, requests, tokens, checks))["oracle"]
    assert row.status == FAIL and row.statistic == 2.0
    assert "2 of 64 mismatched" in row.reason and "'step': 17" in row.reason
    # A max |Δp| above the tolerance fails even with no mismatch counted.
    checks["oracle"].update(mismatches=0, examples=[])
    row = _rows(evaluate_frames(protocol, requests, tokens, checks))["oracle"]
    assert row.status == FAIL


def test_engine_errors_over_tolerance_fail(protocol, clean):
    requests, tokens, checks = clean
    requests = requests.copy()
    requests.loc[requests.index[requests["group"] == "sync_d1"][0], "finish_reason"] = "error"
    ev = evaluate_frames(protocol, requests, tokens, checks)
    row = _rows(ev)["engine_errors"]
    assert row.status == FAIL and row.reason == "engine errors"
    assert row.detail.per_group["sync_d1"] == 1


def test_an_engine_without_events_has_one_stratum(protocol, clean):
    requests, tokens, checks = clean
    tokens = tokens.copy()
    tokens["kind"], tokens["round"], tokens["position"], tokens["drafted"] = "unknown", -2, -2, -1
    tokens["tv"] = np.nan
    tokens["mech_cdf_below"] = tokens["mech_p_token"] = np.nan  # no drafted position
    rows = _rows(evaluate_frames(protocol, requests, tokens, checks))
    assert [s.slot for s in rows["pit_async"].detail.strata] == ["all"]
    assert rows["pit_async"].status == PASS
    # No drafted position is known: acceptance has no evidence, never a pass.
    assert rows["acceptance_async"].status == NO_EVIDENCE


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r, t: (r, t.drop(columns=["tv"])), "missing column"),
        (lambda r, t: (r, t.iloc[::-1].reset_index(drop=True)), "step"),
        (lambda r, t: (r.iloc[1:], t), "requests.csv"),
        (lambda r, t: (r, t.assign(p_token=t["p_token"] + 1.0)), "probabilities"),
        (lambda r, t: (r, t.assign(kind="drafted")), "kind"),
    ],
)
def test_raw_data_that_does_not_fit_is_refused(protocol, clean, edit, message):
    requests, tokens, checks = clean
    with pytest.raises(ValueError, match=message):
        evaluate_frames(protocol, *edit(requests, tokens), checks)


def test_raw_files_and_frames_give_the_same_evaluation(protocol, clean):
    requests, tokens, checks = clean
    raw = RawData(
        {
            REQUESTS: requests.to_csv(index=False).encode(),
            TOKENS: tokens.to_csv(index=False).encode(),
            CHECKS: json.dumps(checks).encode(),
        }
    )
    # The protocol validates and round-trips through its schema.
    data = SequenceProtocol.model_validate(protocol).model_dump(mode="json")
    from_raw = reevaluate(data, raw)
    from_frames = evaluate_frames(protocol, requests, tokens, checks)
    assert [r.to_json() for r in from_raw.tests] == [r.to_json() for r in from_frames.tests]
    assert pd.read_csv(io.BytesIO(raw.bytes(TOKENS)))["tv"].isna().any()


def test_short_strata_pool_into_their_slots_last_band_or_leave_the_slot_untested(protocol, clean):
    proto = copy.deepcopy(protocol)
    proto["strata"]["min_samples"] = 2500
    row = _rows(evaluate_frames(proto, *clean))["pit_async"]
    by_slot: dict[str, list] = {}
    for s in row.detail.strata:
        by_slot.setdefault(s.slot, []).append(s)
        assert s.n >= 2500
    # The first draft position reaches 2,500 in several bands; the last band stands
    # pooled with the short ones: every band of the slot is in some stratum.
    assert sum(len(s.rounds) for s in by_slot["draft_0"]) == len(proto["strata"]["round_bands"])
    # 72 prefill tokens (one per random request): far short, the slot is not tested.
    assert row.detail.untested_slots["async_mixed"]["target"] == 72
    assert row.detail.n_covered < row.detail.n_eligible
    proto["strata"]["min_samples"] = 10**6
    row = _rows(evaluate_frames(proto, *clean))["pit_async"]
    assert row.status == NO_EVIDENCE and row.deciding and row.detail.strata == ()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "pit_correlation"}, "pit_correlation needs pairs"),
        ({"type": "pit_uniformity", "pairs": "lag1"}, "pairs applies to pit_independence"),
        ({"type": "pit_correlation", "pairs": "steps"}, "pairs"),
    ],
)
def test_a_paired_test_without_its_pairs_is_refused(protocol, spec, message):
    bad = {**protocol, "tests": [*protocol["tests"], {"name": "bad", "role": "primary", **spec}]}
    with pytest.raises(ValueError, match=message):
        SequenceProtocol.model_validate(bad)
