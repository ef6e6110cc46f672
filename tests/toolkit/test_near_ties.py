"""Near-ties of the sequence kind's deterministic checks (issue 32, part 1): the
classification of a divergence against the numerics model (runner/near_ties.py), its
accounting in checks.json and the row (kinds/sequence/checks.py), the near-tie limit,
``tolerance: model`` in the protocol schema, and the derived tolerance's power against a
bfloat16-rounded q (the bf16_q mutant's bug).

Constructed cases and fixed-seed laws (numpy PCG64, seeds below); every acceptance has
its negative control: a uniform far from every boundary is a mismatch, a near-tie count
above the limit fails, a bf16-rounded q fails the model tolerance. The near-tie limit's
level is the protocol's numerics.alpha (0.01 here, the (1 - alpha) binomial quantile).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from pydantic import ValidationError

from specconform.adapters.sequence import RequestSpec, RoundUniforms, SequenceRecord
from specconform.adapters.types import TokenEvent
from specconform.calibration.sequence_synthetic import simulate
from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.numerics import check_tolerance, model_at
from specconform.protocol.load import load_protocol
from specconform.protocol.schema_sequence import SequenceProtocol
from specconform.report.numerics import NUMERICS_SECTION
from specconform.results import FAIL, PASS
from specconform.runner.near_ties import classify, inverse_cdf, round_decisions
from specconform.runner.sequence_checks import CheckTally
from specconform.stats.numerics import (
    NumericsModel,
    law_tolerance,
    near_tie_limit,
    residual_bound,
    token_near_tie_rate,
)
from tests.toolkit.fixtures.sequence_run import PROTOCOL_PATH

# ci_sequence's stated model (protocols/ci_sequence.yaml), boundaries cut to 1 so that a
# handful of near-ties already exceeds the limit in the limit test; alpha 0.00125 per
# limit, so that the fixture's four limits (isolation, greedy equality, trace_async
# held to the model: filter near-ties, and out_of_support's filter near-ties) fit the
# verdict's numerics reserve of 0.005 (RESERVE; the schema refuses limits that do not fit).
NUMERICS = {
    "dtype": "float32",
    "reduction_length": 128,
    "kernels": 73,
    "logit_scale": 32.0,
    "growth": "random",
    "boundaries": 1,
    "alpha": 0.00125,
}
RESERVE = {"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.005}
MODEL = model_at(NUMERICS, 1.0)
P = np.array([0.1, 0.4, 0.3, 0.2])  # CDF 0.1, 0.5, 0.8, 1.0
Q = np.array([0.25, 0.25, 0.25, 0.25])
REQ = RequestSpec(prompt=(7, 3), seed=11, temperature=1.0, top_k=0, top_p=1.0, max_tokens=4)


class FakeEngine:
    """Fixed reference laws and uniforms: what the validated adapter would answer."""

    def __init__(self, uniforms: RoundUniforms, logits=None):
        self.uniforms, self.logits = uniforms, logits

    def target_law_for(self, prefix, req):
        return P

    def draft_law_for(self, prefix, req, depth):
        return Q

    def round_uniforms(self, req, round, step):
        return None if req.greedy else self.uniforms

    def target_logits(self, prefix):
        return self.logits


def _target_records(a: int, b: int) -> tuple[SequenceRecord, SequenceRecord]:
    ev = (TokenEvent(-1, -1, "target"),)
    return SequenceRecord((a,), "length", ev, ()), SequenceRecord((b,), "length", ev, ())


def test_a_uniform_at_a_cdf_boundary_is_a_near_tie_and_one_far_from_it_a_mismatch():
    at = 0.5 + MODEL.law_bound / 2  # inside the error of the boundary between 1 and 2
    a, b = _target_records(1, 2)
    div = classify(REQ, a, b, MODEL, FakeEngine(RoundUniforms(target=at)), 2)
    assert div.step == 0 and div.near_tie and div.decision.what == "target"
    # negative control: the same divergence with a uniform far from every boundary
    far = classify(REQ, a, b, MODEL, FakeEngine(RoundUniforms(target=0.65)), 2)
    assert far.step == 0 and not far.near_tie and far.decision.margin > MODEL.law_bound
    # and without the engine's uniforms nothing is assumed: a mismatch
    blind = classify(REQ, a, b, MODEL, FakeEngine(None), 2)  # type: ignore[arg-type]
    assert not blind.near_tie and "round_uniforms" in blind.why


def _round_records() -> tuple[SequenceRecord, SequenceRecord]:
    """Run a accepted draft 0 (token 1) then corrected; run b rejected it at position 0."""
    a = SequenceRecord(
        (1, 3), "length", (TokenEvent(0, 0, "accepted"), TokenEvent(0, 1, "correction")),
        ((1, 1),),
    )  # fmt: skip
    b = SequenceRecord(
        (2, 0), "length", (TokenEvent(0, 0, "correction"), TokenEvent(1, 0, "bonus")),
        ((1, 0), (0, 0)),
    )  # fmt: skip
    return a, b


def test_an_accept_coin_at_its_threshold_is_a_near_tie_and_a_far_one_a_mismatch():
    # draft uniform 0.3 -> token 1 under q (CDF 0.25, 0.5, ...): far from its boundaries;
    # accept iff coin * q(1) < p(1), i.e. coin < 1.6: always accepted. Make p(1) small.
    p = np.array([0.5, 0.2, 0.2, 0.1])
    engine = FakeEngine(RoundUniforms(draft=(0.37,), coin=(0.8,), correction=(0.5,), bonus=0.5))
    engine.target_law_for = lambda prefix, req: p  # type: ignore[method-assign]
    a, b = _round_records()
    # threshold p(1) / q(1) = 0.8: the coin 0.8 sits on it
    div = classify(REQ, a, b, MODEL, engine, 2)
    assert div.step == 0 and div.near_tie and div.decision.what == "coin 0"
    engine.uniforms = RoundUniforms(draft=(0.37,), coin=(0.3,), correction=(0.5,), bonus=0.5)
    far = classify(REQ, a, b, MODEL, engine, 2)  # a clear accept: the runs may not part
    assert not far.near_tie and far.decision.what == "coin 0"


def test_the_reference_chain_replays_a_round_and_stops_at_its_first_near_decision():
    u = RoundUniforms(draft=(0.6, 0.1), coin=(0.2, 0.99), correction=(0.05, 0.7), bonus=0.3)
    tokens, decisions = round_decisions([5], 2, 2, u, lambda _: P, lambda _: Q, MODEL)
    # draft 0: q-CDF 0.6 -> token 2 (p 0.3 / q 0.25: accepted); draft 1 -> token 0,
    # coin 0.99 * 0.25 >= 0.1: rejected, correction from (p - q)+ = (0, .15, .05, 0)
    assert tokens[0] == 2 and tokens[1] == inverse_cdf(np.clip(P - Q, 0, None), 0.7) == 1
    assert [d.what for d in decisions] == ["draft 0", "coin 0", "draft 1", "coin 1", "correction 1"]
    assert not any(d.near for d in decisions)
    near = RoundUniforms(draft=(0.5,) * 2, coin=(0.2,) * 2, correction=(0.05,) * 2, bonus=0.3)
    _, stopped = round_decisions([5], 2, 2, near, lambda _: P, lambda _: Q, MODEL)
    assert [d.what for d in stopped] == ["draft 0"] and stopped[0].near  # 0.5 is a boundary


def test_a_greedy_divergence_is_a_near_tie_only_when_the_top_logits_are_within_the_error():
    a, b = _target_records(1, 2)
    greedy = RequestSpec((7,), None, 0.0, 0, 1.0, 4)
    tied = np.array([0.0, 20.0, 20.0 - 1e-5, -3.0])
    div = classify(greedy, a, b, MODEL, FakeEngine(RoundUniforms(), tied), None)
    assert div.near_tie and div.decision.what == "greedy"
    apart = np.array([0.0, 20.0, 19.0, -3.0])
    assert not classify(greedy, a, b, MODEL, FakeEngine(RoundUniforms(), apart), None).near_tie


def test_the_law_bound_holds_for_cdf_values_and_the_residual_bound_for_the_residual():
    rng = np.random.default_rng(3210)
    model = NumericsModel("float32", 128, 73, 53.3)
    delta, eps = model.logit_bound, model.law_bound
    worst_cdf = worst_res = 0.0
    for _ in range(500):
        z, zq = rng.normal(0, 3, size=48), rng.normal(0, 3, size=48)
        p, q = _softmax(z), _softmax(zq)
        p2 = _softmax(z + rng.uniform(-delta, delta, 48))
        q2 = _softmax(zq + rng.uniform(-delta, delta, 48))
        worst_cdf = max(worst_cdf, float(np.abs(np.cumsum(p2) - np.cumsum(p)).max()))
        r, r2 = np.clip(p - q, 0, None), np.clip(p2 - q2, 0, None)
        moved = np.abs(np.cumsum(r2) / r2.sum() - np.cumsum(r) / r.sum()).max()
        worst_res = max(worst_res, float(moved / residual_bound(eps, float(r.sum()))))
    assert worst_cdf <= eps and worst_res <= 1.0
    assert worst_cdf > eps / 10  # negative control: the bound is not vacuous


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


# --- accounting in checks.json and the row ----------------------------------------------


@pytest.fixture(scope="module")
def numeric_protocol() -> dict:
    data = copy.deepcopy(load_protocol(PROTOCOL_PATH).data)
    data["numerics"], data["verdict"] = dict(NUMERICS), dict(RESERVE)
    for t in data["tests"]:
        if t["type"] == "trace":
            t["tolerance"] = "model"
    SequenceProtocol.model_validate(data)
    return data


@pytest.fixture(scope="module")
def clean(numeric_protocol):
    return simulate(numeric_protocol, 1)


def _row(protocol, frames, checks, name):
    ev = evaluate_frames(protocol, frames[0], frames[1], checks)
    return next(r for r in ev.tests if r.test == name), ev


def _isolation(protocol, near: bool) -> dict:
    """An isolation record from the runner's tally: 3 equal requests and one divergence,
    near a boundary or not."""
    spec = next(t for t in protocol["tests"] if t["type"] == "isolation")
    tally = CheckTally("isolation", None, numerics=None, near_ties=0)
    from specconform.kinds.sequence.numerics import check_model, model_json

    tally.numerics = model_json(check_model(protocol, spec))
    a, b = _target_records(1, 2)
    for i in range(3):
        tally.add_divergence(classify(REQ, a, a, MODEL, FakeEngine(RoundUniforms()), 2), {"i": i})
    u = RoundUniforms(target=0.5 if near else 0.65)
    tally.add_divergence(classify(REQ, a, b, MODEL, FakeEngine(u), 2), {"request": 3})
    return spec["name"], tally.record()


def test_a_near_tie_is_counted_apart_and_passes_and_a_far_divergence_fails(numeric_protocol, clean):
    name, rec = _isolation(numeric_protocol, near=True)
    assert rec["near_ties"] == 1 and rec["mismatches"] == 0 and rec["checked"] == 4
    checks = {**clean[2], name: rec}
    row, ev = _row(numeric_protocol, clean, checks, name)
    assert row.status == PASS and row.detail.mismatches == 0
    assert row.detail.near_ties == 1 and row.detail.near_tie_examples[0]["decision"] == "target"
    assert ev.verdict.verdict == "PASS"
    # reported apart, never silently: the terminal lines name the count and the limit
    lines = NUMERICS_SECTION.terminal_lines(ev)
    assert any(f"{name}: 1 near-tie(s) in 4 decisions" in line for line in lines)
    assert any("near-tie: {" in line and "'decision': 'target'" in line for line in lines)
    name, rec = _isolation(numeric_protocol, near=False)  # negative control
    assert rec["near_ties"] == 0 and rec["mismatches"] == 1
    row, ev = _row(numeric_protocol, clean, {**clean[2], name: rec}, name)
    assert row.status == FAIL and ev.verdict.verdict == "FAIL"


def test_more_near_ties_than_the_model_allows_fail(numeric_protocol, clean):
    name, rec = _isolation(numeric_protocol, near=True)
    rate = token_near_tie_rate(MODEL, 1)
    limit = near_tie_limit(4, rate, 0.01)
    assert limit == 1  # 4 decisions at rate ~0.013: two near-ties have P < 0.01
    row, _ = _row(numeric_protocol, clean, {**clean[2], name: rec}, name)
    assert row.status == PASS and row.detail.near_tie_limit == limit
    rec = {**rec, "near_ties": 2, "checked": 4, "decisions": 4}
    row, ev = _row(numeric_protocol, clean, {**clean[2], name: rec}, name)
    assert row.status == FAIL and "model refuted" in row.reason and ev.verdict.verdict == "FAIL"


def test_verify_recomputes_the_model_tolerance_and_refuses_another(numeric_protocol, clean):
    checks = copy.deepcopy(clean[2])
    spec = next(t for t in numeric_protocol["tests"] if t["name"] == "trace_async")
    assert checks["trace_async"]["tolerance"] == check_tolerance(numeric_protocol, spec)
    checks["trace_async"]["tolerance"] = 1e-3  # a record that widened its own tolerance
    with pytest.raises(ValueError, match="used tolerance"):
        evaluate_frames(numeric_protocol, clean[0], clean[1], checks)
    name, rec = _isolation(numeric_protocol, near=True)
    plain = copy.deepcopy(load_protocol(PROTOCOL_PATH).data)  # no numerics block
    with pytest.raises(ValueError, match="near-tie"):
        evaluate_frames(plain, *simulate(plain, 1)[:2], {**simulate(plain, 1)[2], name: rec})


# --- the protocol and the tolerance's power -------------------------------------------


def test_tolerance_model_needs_a_numerics_block_and_a_law_check():
    data = copy.deepcopy(load_protocol(PROTOCOL_PATH).data)
    trace = next(t for t in data["tests"] if t["type"] == "trace")
    trace["tolerance"] = "model"
    with pytest.raises(ValidationError, match="needs the protocol's numerics block"):
        SequenceProtocol.model_validate(data)
    data["numerics"] = dict(NUMERICS)
    # the four near-tie limits' levels (4 x 0.00125: trace_async held to the model counts
    # filter near-ties, and so does out_of_support) must fit in the verdict's reserve
    with pytest.raises(ValidationError, match=r"= 0.005 exceeds verdict.numerics_reserve 0\b"):
        SequenceProtocol.model_validate(data)
    data["verdict"] = {**RESERVE, "numerics_reserve": 0.004}
    match = "trace_async, isolation_async, greedy_async, out_of_support"
    with pytest.raises(ValidationError, match=match):
        SequenceProtocol.model_validate(data)
    data["verdict"] = dict(RESERVE)
    SequenceProtocol.model_validate(data)
    iso = next(t for t in data["tests"] if t["type"] == "isolation")
    iso["tolerance"] = "model"
    with pytest.raises(ValidationError, match="applies to oracle, teacher_forcing, trace only"):
        SequenceProtocol.model_validate(data)
    iso.pop("tolerance")
    data["numerics"]["dtype"] = "float8"
    with pytest.raises(ValidationError):
        SequenceProtocol.model_validate(data)


def test_ci_sequence_derives_tolerances_between_the_false_fail_and_the_bf16_bug():
    protocol = load_protocol("protocols/ci_sequence.yaml").data
    tol = {t["name"]: check_tolerance(protocol, t) for t in protocol["tests"]}
    for name in ("trace_async", "trace_grid", "teacher_forcing"):
        # the measured real-engine false fail (1.083e-5) inside, a bf16-rounded q outside
        assert 1.083e-5 * 10 < tol[name] < 1e-3 / 2
    assert tol["trace_async"] == law_tolerance(model_at(protocol["numerics"], 0.6))
    assert tol["trace_grid"] == law_tolerance(model_at(protocol["numerics"], 0.7))


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even) and back."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def test_a_bf16_rounded_q_fails_the_model_tolerance_and_numerical_noise_passes():
    protocol = load_protocol("protocols/ci_sequence.yaml").data
    spec = next(t for t in protocol["tests"] if t["name"] == "trace_async")
    model = model_at(protocol["numerics"], 0.6)
    rng = np.random.default_rng(3211)
    bug = CheckTally("trace", check_tolerance(protocol, spec))
    noise = CheckTally("trace", check_tolerance(protocol, spec))
    for _ in range(20):  # laws like the tiny preset's: |logit / T| up to ~50
        z = rng.normal(0, 6, size=512).astype(np.float32) / 0.6
        q = _softmax(z).astype(np.float32)
        bug.add_laws(q, _bf16(q), {})
        e = rng.uniform(-model.logit_bound, model.logit_bound, size=512)
        noise.add_laws(q, _softmax(z + e).astype(np.float32), {})
    assert bug.mismatches > 0 and bug.max_abs_diff > bug.tolerance
    assert noise.mismatches == 0


def test_a_law_check_bounds_its_filter_near_ties(numeric_protocol, clean):
    """trace held to the model counts support differences at a top-k/top-p threshold
    inside the error (runner/filter_ties.py) against a limit recomputed from the protocol
    (filter_near_tie_rate at numerics.alpha): at the limit PASS, one above it FAIL."""
    from specconform.kinds.sequence.numerics import tie_limit

    spec = next(t for t in numeric_protocol["tests"] if t["name"] == "trace_async")
    rec = copy.deepcopy(clean[2]["trace_async"])
    rec.update(checked=40, decisions=40)
    limit = tie_limit(numeric_protocol, spec, 40)
    assert 0 < limit < 40
    rec["near_ties"] = limit
    row, ev = _row(numeric_protocol, clean, {**clean[2], "trace_async": rec}, "trace_async")
    assert row.status == PASS and row.detail.near_tie_limit == limit
    assert any(
        "filter near-tie(s) in 40 filtered comparisons" in x
        for x in NUMERICS_SECTION.terminal_lines(ev)
    )
    rec["near_ties"] = limit + 1
    row, ev = _row(numeric_protocol, clean, {**clean[2], "trace_async": rec}, "trace_async")
    assert row.status == FAIL and "model refuted" in row.reason and ev.verdict.verdict == "FAIL"
