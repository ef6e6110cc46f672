"""Tests that need the draft law q (acceptance, joint) on an adapter whose capabilities
say ``draft_law: false`` read NO_EVIDENCE "not applicable: the adapter gives no draft
law": never PASS, never a crash, and a deciding one fails the verdict for that reason.

Samples come from the exact laws (specconform.calibration's synthetic world, seed 1,
5000 seeds), the same data on which tests/toolkit/test_distribution_eval.py shows every
acceptance and joint row PASS with q present: so the rows below differ only by the
missing q, not by the data.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from specconform.calibration import make_world, simulate
from specconform.kinds.distribution import evaluate_frames
from specconform.kinds.distribution.rows import NOT_APPLICABLE_NO_Q
from specconform.report.model import outcome
from specconform.results import NO_EVIDENCE, PASS
from tests.toolkit.synthetic import PROTOCOL

NEEDS_Q = ("acceptance", "joint")


@pytest.fixture(scope="module")
def world_samples():
    world = make_world(0)
    samples = simulate(world, 5000, np.random.default_rng(1), groups=PROTOCOL["groups"])
    return world, samples


def _without_q(reference: dict) -> dict:
    """reference.json as the runner writes it for an adapter without q."""
    ref = copy.deepcopy(reference)
    ref["q_t2"] = {}
    ref["capabilities"] = {"draft_law": False}
    return ref


def test_with_q_the_mechanism_rows_have_evidence(world_samples):
    world, samples = world_samples
    rows = {r.test: r for r in evaluate_frames(PROTOCOL, samples, world.reference).tests}
    for spec in PROTOCOL["tests"]:
        if spec["type"] in NEEDS_Q:
            assert rows[spec["name"]].status == PASS and rows[spec["name"]].n > 0


def test_without_q_they_are_not_applicable_never_pass(world_samples):
    world, samples = world_samples
    ev = evaluate_frames(PROTOCOL, samples, _without_q(world.reference))
    rows = {r.test: r for r in ev.tests}
    checked = 0
    for spec in PROTOCOL["tests"]:
        row = rows[spec["name"]]
        if spec["type"] in NEEDS_Q:
            checked += 1
            assert row.status == NO_EVIDENCE and row.passed is not True
            assert row.reason == NOT_APPLICABLE_NO_Q
            assert row.detail.no_evidence == NOT_APPLICABLE_NO_Q
            assert outcome(row) == f"no evidence ({NOT_APPLICABLE_NO_Q})"
        elif spec["role"] != "exploratory":
            assert row.status == PASS  # the tests that need only p are unaffected
    assert checked == sum(s["type"] in NEEDS_Q for s in PROTOCOL["tests"]) > 0
    assert ev.verdict.verdict == "PASS"  # mechanism / secondary rows do not decide here


def test_a_deciding_not_applicable_test_makes_the_verdict_inconclusive(world_samples):
    world, samples = world_samples
    protocol = copy.deepcopy(PROTOCOL)
    protocol["decision_roles"] = ["prerequisite", "primary", "mechanism"]
    ev = evaluate_frames(protocol, samples, _without_q(world.reference))
    reasons = dict(ev.verdict.reasons)
    acceptance = [s["name"] for s in protocol["tests"] if s["type"] == "acceptance"]
    assert ev.verdict.verdict == "INCONCLUSIVE"  # never PASS; not a failure shown either
    assert acceptance and all(reasons[name] == NOT_APPLICABLE_NO_Q for name in acceptance)
    assert set(acceptance) <= set(ev.verdict.inconclusive)
