"""The independent oracle of the sampling semantics (specconform.stats.oracle): hand-computed
fixtures, agreement with the engine's serial reference, and the oracle check's
negative controls (a reference with the wrong semantics FAILs it).

Deterministic throughout: no α; every expected law below is computed by hand in the
comment next to it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specconform.runner.sequence_checks import CheckTally, oracle_check
from specconform.stats.oracle import SamplingSemantics, compare_laws, oracle_law


def law(logits, t, k=0, p=1.0):
    return oracle_law(np.asarray(logits, dtype=np.float32), SamplingSemantics(t, k, p))


def test_greedy_is_one_hot_at_lowest_argmax():
    # argmax of [1, 3, 3, 2] is 3 at ids 1 and 2: the lowest id wins.
    assert law([1, 3, 3, 2], 0.0).tolist() == [0, 1, 0, 0]


def test_top_k_keeps_every_tie_of_the_kth_value():
    # k = 2 on [2, 1, 1, 0]: the 2nd largest is 1, held by ids 1 and 2 -> 3 tokens kept,
    # softmax of [2, 1, 1]: e^2 / (e^2 + 2e), e / (e^2 + 2e).
    e = math.e
    got = law([2, 1, 1, 0], 1.0, k=2)
    z = e**2 + 2 * e
    np.testing.assert_allclose(got, [e**2 / z, e / z, e / z, 0.0], rtol=1e-6)


def test_top_p_crossing_token_exactly_at_the_boundary():
    # Four equal logits: probabilities exactly 0.25. Cumulative 0.25, 0.5, ...: the mass
    # reaches top_p = 0.5 exactly at the 2nd token (>= counts), so 2 tokens (ids 0, 1:
    # lower id first among ties) and the law [0.5, 0.5, 0, 0].
    assert law([0, 0, 0, 0], 1.0, p=0.5).tolist() == [0.5, 0.5, 0.0, 0.0]
    # Just above 0.5 (in float32) the 3rd token is needed.
    above = float(np.nextafter(np.float32(0.5), np.float32(1)))
    np.testing.assert_allclose(law([0, 0, 0, 0], 1.0, p=above), [1 / 3] * 3 + [0], rtol=1e-6)


def test_top_p_includes_the_crossing_token():
    # top_p 0.3 on four 0.25s: 0.25 < 0.3, 0.5 >= 0.3 -> the crossing (2nd) token is kept.
    assert law([0, 0, 0, 0], 1.0, p=0.3).tolist() == [0.5, 0.5, 0.0, 0.0]


def test_top_p_one_keeps_everything():
    got = law([3, -1, 0.5, 2], 1.0, p=1.0)
    x = np.array([3, -1, 0.5, 2.0])
    np.testing.assert_allclose(got, np.exp(x) / np.exp(x).sum(), rtol=1e-6)


def test_temperature_comes_before_top_p():
    # logits [1, 0, 0], top_p 0.6. At T = 0.5 the scaled logits are [2, 0, 0]:
    # p0 = e^2 / (e^2 + 2) = 0.787 >= 0.6 -> one token. Applying top-p to the T = 1
    # probabilities (p0 = e / (e + 2) = 0.576 < 0.6 -> 2 tokens) and then dividing by T
    # would give softmax([2, 0]) = [0.881, 0.119, 0].
    assert law([1, 0, 0], 0.5, p=0.6).tolist() == [1.0, 0.0, 0.0]
    # And temperature scales the kept logits: [2, 0] / 2 at T = 2 is [1, 0] -> e/(e+1).
    np.testing.assert_allclose(law([2, 0], 2.0), [math.e / (math.e + 1), 1 / (math.e + 1)])


def test_one_token_support():
    assert law([0.1, 5, 2], 1.0, k=1).tolist() == [0, 1, 0]
    assert law([0.1, 5, 2], 1.0, p=0.01).tolist() == [0, 1, 0]
    # top-k 1 with a tie at the top keeps both (ties survive): [0.5, 0.5, 0].
    assert law([3, 3, 1], 1.0, k=1).tolist() == [0.5, 0.5, 0.0]
    # top-k >= V is off.
    assert np.count_nonzero(law([1, 2, 3], 1.0, k=3)) == 3


def test_agrees_with_the_engine_reference():
    torch = pytest.importorskip("torch")
    from engine_under_test import SamplingParams
    from engine_under_test.sampling import Sampler

    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(40):
        logits = (rng.standard_normal(512) * 4).astype(np.float32)
        logits[rng.integers(0, 512, 8)] = logits.max()  # ties at the top
        for t, k, p in [(0.0, 0, 1.0), (0.6, 20, 1.0), (1.4, 0, 0.9), (1.0, 20, 0.9)]:
            ref = Sampler.probabilities(torch.from_numpy(logits), SamplingParams(t, k, p))
            c = compare_laws(ref.numpy(), law(logits, t, k, p))
            assert c.same_support, (t, k, p)
            worst = max(worst, c.max_abs_diff)
    # float32 softmax in another library: a few ulps of the largest probability.
    assert worst <= 1e-6


# --- the oracle check and its negative controls -------------------------------------


def _wrong_order(logits, req):
    """top-p on the T = 1 probabilities, then temperature: a reference bug."""
    x = np.asarray(logits, dtype=np.float32)
    kept = oracle_law(x, SamplingSemantics(1.0, req.top_k, req.top_p)) > 0
    z = np.where(kept, x / np.float32(req.temperature), -np.inf)
    e = np.exp(z - z[kept].max())
    return e / e.sum()


def _drops_crossing(logits, req):
    """top-p keeps only the tokens strictly before the crossing one (at least one)."""
    x = np.asarray(logits, dtype=np.float32) / np.float32(req.temperature)
    probs = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    order = np.argsort(-probs, kind="stable")
    n = max(1, int(np.searchsorted(np.cumsum(probs[order]), req.top_p, side="left")))
    keep = np.zeros(x.shape, dtype=bool)
    keep[order[:n]] = True
    z = np.where(keep, x, -np.inf)
    e = np.exp(z - z[keep].max())
    return e / e.sum()


def _run_check(reference):
    from specconform.adapters.sequence import RequestSpec

    rng = np.random.default_rng(1)
    logits = {i: (rng.standard_normal(256) * 3).astype(np.float32) for i in range(16)}
    req = RequestSpec((1, 2), 5, 1.0, 0, 1.0, 8)
    prefixes = [({"step": i}, [i], req) for i in range(16)]
    configs = [(0.6, 0, 0.9), (1.4, 20, 0.9), (1.0, 0, 1.0)]
    tally = CheckTally("oracle", 1e-6)

    def target_law_for(prefix, r):
        return reference(logits[prefix[0]], r)

    return oracle_check(tally, prefixes, configs, target_law_for, lambda pr: logits[pr[0]])


def test_oracle_check_passes_the_specified_reference():
    tally = _run_check(
        lambda x, r: oracle_law(x, SamplingSemantics(r.temperature, r.top_k, r.top_p))
    )
    assert tally.checked == 48 and tally.mismatches == 0


@pytest.mark.parametrize("reference", [_wrong_order, _drops_crossing])
def test_oracle_check_fails_wrong_semantics(reference):
    tally = _run_check(reference)
    # Every prefix under the top-p configurations differs (32 of 48 comparisons):
    # T != 1 changes the top-p set, and the crossing token is almost never exactly at
    # top_p; T = 1 without top-p is the same law in both.
    assert tally.mismatches >= 16
    assert tally.record()["examples"]
