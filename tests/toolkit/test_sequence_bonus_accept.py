"""accept_after_bonus: the next round's first accept decision against the bonus token's
mid-PIT (specconform/stats/bonus_accept.py, specconform/kinds/sequence/bonus_accept.py),
on the numpy speculative sampler's exact laws (specconform/calibration/sequence_synthetic.py).

The negative control is the synthetic ``bonus_overlap`` (the bonus's uniform reused as the
next round's first coin: the engine's ``rng_bonus_overlaps_next_round``); the size is
measured over 1,000 null replications in docs/calibration.md.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm

from specconform.calibration.sequence_synthetic import simulate
from specconform.kinds.sequence import evaluate_frames
from specconform.protocol.load import load_protocol
from specconform.results import FAIL, NO_EVIDENCE, PASS
from specconform.stats.bonus_accept import bonus_accept_test
from tests.toolkit.cli_helpers import ROOT


def test_statistic_is_the_weighted_martingale_z():
    g = np.array([0.4, -0.4, 0.2, -0.1])
    a = np.array([0.8, 0.5, 0.6, 0.9])
    hit = np.array([1, 0, 1, 1], dtype=bool)
    res = bonus_accept_test(g, hit, a)
    s = 0.4 * 0.2 - 0.4 * (0 - 0.5) + 0.2 * 0.4 - 0.1 * 0.1
    v = 0.16 * 0.16 + 0.16 * 0.25 + 0.04 * 0.24 + 0.01 * 0.09
    assert res.sum_weighted == pytest.approx(s) and res.variance == pytest.approx(v)
    assert res.z == pytest.approx(s / np.sqrt(v))
    assert res.pvalue == pytest.approx(2 * norm.sf(abs(s / np.sqrt(v))))
    assert (res.accepted, res.expected_accepted) == (3, pytest.approx(2.8))
    # No variance (every a in {0, 1}, or every weight 0): no z, no p.
    assert bonus_accept_test(np.zeros(3), hit[:3], a[:3]).pvalue is None


def _protocol(**group_requests) -> dict:
    data = json.loads(json.dumps(load_protocol(ROOT / "protocols" / "ci_sequence.yaml").data))
    for g in data["groups"]:
        if g["name"] in group_requests:
            g["requests"] = group_requests[g["name"]]
    return data


def _row(protocol, seed, mutant=None):
    ev = evaluate_frames({**protocol, "pit_seed": seed}, *simulate(protocol, seed, mutant))
    return ev, {r.test: r for r in ev.tests}["bonus_accept"]


@pytest.mark.parametrize("seed", [1, 2])
def test_clean_sampler_passes_and_the_overlapping_bonus_fails(seed):
    """At the shipped ci_sequence layout: the clean sampler passes (the verdict too), the
    bonus_overlap sampler FAILs the test and the verdict (a low bonus PIT makes the next
    first draft likelier to be accepted: z far below 0)."""
    protocol = _protocol()
    ev, row = _row(protocol, seed)
    assert row.status == PASS and row.deciding and row.df == 1 and row.n >= 500
    assert ev.verdict.verdict == "PASS", ev.verdict.reasons
    ev, row = _row(protocol, seed, "bonus_overlap")
    assert row.status == FAIL and row.detail.z < -6 and row.adjusted_pvalue < 0.01
    assert "bonus_accept" in ev.verdict.failed


def test_too_few_pairs_is_no_evidence():
    protocol = _protocol(async_mixed=2, sync_d1=1, grid_async=1)
    for g in protocol["groups"]:
        g["max_tokens"] = [16]  # a handful of rounds: a few bonus pairs
    _, row = _row(protocol, 1)
    assert 0 < row.detail.n < 50
    assert row.status == NO_EVIDENCE and "fewer than 50" in row.reason
