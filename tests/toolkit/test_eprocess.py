"""The e-process: its factors by hand, Ville's bound under continuous monitoring, and
that it fails a wrong sampler (negative control)."""

from pathlib import Path

import numpy as np
from scipy import stats as sps

from specconform.calibration import load_reference, simulate, world_from_reference
from specconform.protocol.load import load_protocol
from specconform.stats.eprocess import kt_log_factors, sequential_test

ROOT = Path(__file__).resolve().parents[2]


def test_factors_by_hand():
    # One stratum, cells with p0 = (0.5, 0.5); prior mass ½ C = 1 centred on p0.
    f = kt_log_factors(
        np.zeros(3, int), np.array([0, 0, 1]), np.array([0.5, 0.5, 0.5]), np.array([2, 2, 2])
    )
    # q̂: 0.5 (no data), then (1 + .5)/(1 + 1) = .75 for cell 0, then (0 + .5)/(2 + 1) for 1.
    assert np.allclose(np.exp(f), [1.0, 1.5, (0.5 / 3) / 0.5])
    impossible = kt_log_factors(np.zeros(1, int), np.zeros(1, int), np.zeros(1), np.ones(1, int))
    assert impossible[0] == np.inf


def _crossed(p0, law, n, reps, rng, alpha):
    hits = 0
    for _ in range(reps):
        x = rng.choice(law.size, size=n, p=law)
        path = np.cumsum(kt_log_factors(np.zeros(n, int), x, p0[x], np.full(n, p0.size)))
        hits += bool((path >= np.log(1 / alpha)).any())
    return hits


def test_ville_under_continuous_monitoring_and_power():
    # 300 null sequences of 1,000 draws from a 4-cell law, checked after every draw at
    # alpha = 0.05: Ville gives P(cross) <= 0.05, so crossings ~ at most Binomial(300,
    # .05); the bound is its 99.9 % quantile (27). Negative control: a law at TV 0.15
    # from p0 crosses in at least 290 of 300 (observed power is ~1 at this size).
    rng = np.random.default_rng(2026)
    p0 = np.array([0.4, 0.3, 0.2, 0.1])
    bound = sps.binom.ppf(0.999, 300, 0.05)
    assert _crossed(p0, p0, 1000, 300, rng, 0.05) <= bound
    alt = np.array([0.55, 0.25, 0.12, 0.08])
    assert _crossed(p0, alt, 1000, 300, rng, 0.05) >= 290


def test_sequential_protocol_passes_exact_and_fails_a_bug():
    pr = load_protocol(ROOT / "protocols/ci_gate.yaml").data
    w = world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))
    ok = sequential_test(pr, w, simulate(w, 2000, np.random.default_rng(4), groups=pr["groups"]))
    assert ok.verdict == "PASS" and ok.log_e.shape == (2000,)
    assert ok.families == (("nospec",), ("sync", "async", "sync_d1", "async_d1"))
    bad = sequential_test(
        pr,
        w,
        simulate(w, 2000, np.random.default_rng(4), groups=pr["groups"], mutant="greedy_draft"),
    )
    assert bad.verdict == "FAIL" and bad.crossed_at < 500
