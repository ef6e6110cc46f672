"""Exact laws of the bundled engine's engine-only planted bugs (stats.mutant_laws)
against the mechanistic simulator of bench/kill_matrix_laws.py, on the tiny preset's
exact laws. (The laws against the engine itself: `bench/kill_matrix_laws.py --check`,
docs/kill-matrix.md.)"""

import sys
from pathlib import Path

import numpy as np
import pytest

from specconform.calibration import load_reference, world_from_reference
from specconform.planning import _group_law, group_out_of_support
from specconform.protocol.load import load_protocol
from specconform.stats import pearson_gof
from specconform.stats.mutant_laws import first_position_law, one_sequence_statistic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from kill_matrix_laws import simulate_engine_bug  # noqa: E402


@pytest.fixture(scope="module")
def gate():
    protocol = load_protocol(ROOT / "protocols/ci_gate.yaml").data
    world = world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))
    return protocol, world


def _async_d1(protocol, world, bug, n, seed):
    groups = [g for g in protocol["groups"] if g["name"] == "async_d1"]
    return simulate_engine_bug(
        world, {**protocol, "groups": groups}, n, np.random.default_rng(seed), bug
    )


@pytest.mark.parametrize("bug", ["target_default_params", "draft_raw_q", "residual_inplace"])
def test_first_position_law_matches_the_simulator(gate, bug):
    # The largest t1 stratum (p1 = 0.49: ~9,800 of 20,000 seeds) at depth 1: the derived
    # joint law fits the simulated joint cells (Pearson, alpha = 0.001: a correct law
    # fails with probability 0.001; fixed seed), and the correct law is rejected at
    # p < 1e-6 (negative control; exact-law power of that test ~1 for these three bugs).
    protocol, w = gate
    s = _async_d1(protocol, w, bug, 20000, 5)
    i = int(np.argmax(w.p1))
    s = s[s.t1 == w.t1_tokens[i]]
    p, q, law = _group_law(w, i, 1, bug)
    toks = [int(t) for t in w.u_tokens[i] if t >= 0]
    m = law.accepted.size
    col = np.array([toks.index(t) if t in toks else m - 1 for t in s.t2])
    acc = s.first_accepted.to_numpy() == 1
    counts = np.bincount(col + np.where(acc, 0, m), minlength=2 * m)
    assert law.joint.sum() == pytest.approx(1.0)
    assert pearson_gof(counts, law.joint).pvalue > 1e-3
    correct = first_position_law(p, q)
    assert pearson_gof(counts, correct.joint).pvalue < 1e-6


@pytest.mark.parametrize("bug", ["bonus_params", "async_stale_input", "target_default_params"])
def test_out_of_support_rate_matches_the_simulator(gate, bug):
    # P(t2 or t3 outside the target's support) per async_d1 seed: derived vs 20,000
    # simulated seeds, within 4.5 binomial standard deviations (two-sided ~7e-6).
    protocol, w = gate
    s = _async_d1(protocol, w, bug, 20000, 6)
    pi = sum(w.p1[i] * group_out_of_support(w, i, 1, "async", bug) for i in range(w.p1.size))
    ref = w.reference
    bad = sum(
        str(t2) not in ref["p_t2"][str(t1)] or str(t3) not in ref["p_t3"][f"{t1},{t2}"]
        for t1, t2, t3 in s[["t1", "t2", "t3"]].itertuples(index=False)
    )
    assert pi > 0.002
    assert abs(bad - 20000 * pi) < 4.5 * np.sqrt(20000 * pi * (1 - pi))


def test_first_position_exact_bugs_and_sync_stale_input(gate):
    protocol, w = gate
    i = int(np.argmax(w.p1))
    p, q = w.p2[i], w.q2[1][i]
    for bug in ("bonus_params", "async_stale_input", "shared_rng"):
        assert np.allclose(first_position_law(p, q, bug).joint, first_position_law(p, q).joint)
    # The stale input is the async runner's: a sync group commits the correct t3.
    assert group_out_of_support(w, i, 1, "sync", "async_stale_input") == 0.0
    with pytest.raises(ValueError, match="needs p_raw"):
        first_position_law(p, q, "target_default_params")


def test_shared_rng_commits_one_sequence_per_batch(gate):
    # One batch per group (batch_size = seeds): every row equals the first; the t1 test's
    # chi2 is then at least n (1/max P_c - 1) whatever token the block draws.
    protocol, w = gate
    s = _async_d1(protocol, w, "shared_rng", 500, 7)
    assert s[["t1", "t2", "t3", "first_accepted"]].nunique().max() == 1
    stat = one_sequence_statistic(w.p1, 2000)
    assert stat == pytest.approx(2000 * (w.p1.sum() / w.p1.max() - 1), rel=1e-9)
