"""t1 over seed-sharing groups (issue 32, part 4): Simes instead of Bonferroni.

ci_gate's t1_speculative tests four groups that share seeds; on a correct engine they
draw the very same t1, so Bonferroni (each group at alpha / 4) spends a quarter of the
test's level. Simes (stats.aggregate.simes) wastes none there and keeps its level for
independent or partly shared groups. Measured here by fixed-seed replication on an
exact law (R = 3,000 replications of 4 groups x 2,000 draws, alpha = 0.01), through the
same Pearson test (pooling at min_expected 5) the evaluator uses.

Thresholds (alpha = 0.01, R = 3,000, expected 30 rejections at an exact level):
- level kept: at most 45 rejections (P(Binomial(3000, 0.01) > 45) = 0.0038): a
  procedure at level 0.01 breaks it with probability < 0.4 %; an anticonservative one
  at 0.02 (expected 60) passes it with probability 2.5 %;
- level used (identical groups): at least 16 rejections (P(Binomial(3000, 0.01) < 16)
  = 0.0019); Bonferroni's 0.0025 (expected 7.5) reaches 16 with probability 0.46 %.
Negative controls: plain min-p (no correction) over independent groups breaks the level
check (its level is 1 - 0.99^4 = 0.039: P(at most 45 of 3,000) = 5e-15); a sampler
tempered in one group (T = 1.5, TV 0.10 from the exact law) is rejected by Simes in
every one of 200 replications at this fixed seed (T = 1.3, TV 0.07: 199 of 200).
"""

from __future__ import annotations

import numpy as np
import pytest

from specconform.stats.aggregate import bonferroni, simes
from specconform.stats.gof import pearson_gof

ALPHA, R, N, GROUPS = 0.01, 3000, 2000, 4
LEVEL_MAX, LEVEL_MIN = 45, 16


def _law(seed: int = 0, cells: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(cells, 0.5))
    return p / p.sum()


def _pvalues(counts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """[R, G] p-values of each group's counts ([R, G, C]) against p."""
    return np.array([[pearson_gof(c, p, min_expected=5.0).pvalue for c in rep] for rep in counts])


def _counts(p: np.ndarray, sharing: str, rng: np.random.Generator, q=None) -> np.ndarray:
    """[R, G, C] t1 counts of G groups: the same draws ("identical"), independent draws,
    or half of each group's seeds shared ("half"). ``q``: group 0's law (a bug)."""
    if sharing == "identical":
        one = rng.multinomial(N, p, size=R)
        out = np.repeat(one[:, None, :], GROUPS, axis=1)
    elif sharing == "independent":
        out = rng.multinomial(N, p, size=(R, GROUPS))
    else:
        shared = rng.multinomial(N // 2, p, size=R)[:, None, :]
        out = shared + rng.multinomial(N - N // 2, p, size=(R, GROUPS))
    if q is not None:
        out[:, 0, :] = rng.multinomial(N, q, size=len(out))
    return out


@pytest.mark.parametrize("sharing", ["identical", "half", "independent"])
def test_simes_keeps_its_level_on_seed_sharing_groups(sharing):
    p = _law()
    ps = _pvalues(_counts(p, sharing, np.random.default_rng([32, len(sharing)])), p)
    rejections = sum(simes(row).pvalue < ALPHA for row in ps)
    assert rejections <= LEVEL_MAX, (sharing, rejections)
    if sharing == "identical":
        # no level wasted where Bonferroni spends three quarters of it
        assert rejections >= LEVEL_MIN, rejections
        assert sum(bonferroni(row).pvalue < ALPHA for row in ps) < LEVEL_MIN


def test_negative_control_uncorrected_min_p_breaks_the_level_check():
    p = _law()
    ps = _pvalues(_counts(p, "independent", np.random.default_rng([32, 99])), p)
    assert sum(row.min() < ALPHA for row in ps) > LEVEL_MAX  # level ~0.039: caught


def test_negative_control_a_wrong_sampler_in_one_group_fails():
    p = _law()
    q = p ** (1 / 1.5)
    q /= q.sum()
    rng = np.random.default_rng([32, 7])
    counts = _counts(p, "identical", rng, q=q)[:200]
    ps = _pvalues(counts, p)
    assert all(simes(row).pvalue < ALPHA for row in ps)


def test_simes_by_hand_and_missing_parts():
    # sorted 0.01, 0.02, 0.04, 0.5: min(4*.01/1, 4*.02/2, 4*.04/3, 4*.5/4) = 0.04
    res = simes([0.04, 0.01, float("nan"), 0.5, 0.02])
    assert res.pvalue == pytest.approx(0.04) and res.m == 4 and res.argmin == 1
    assert simes([0.3, 0.3, 0.3, 0.3]).pvalue == pytest.approx(0.3)  # identical: no waste
    assert bonferroni([0.3] * 4).pvalue == pytest.approx(1.0)
    assert np.isnan(simes([float("nan")]).pvalue) and simes([]).m == 0


def test_the_evaluator_combines_a_simes_t1_test_by_simes(world, ref):
    # world, ref: tests/toolkit/conftest.py (exact synthetic laws); fixed seed, no threshold.
    from specconform.calibration import simulate
    from specconform.kinds.distribution import evaluate_frames
    from tests.toolkit.synthetic import PROTOCOL

    tests = [
        {**t, "combine": "simes"} if t["name"] == "t1_speculative" else t for t in PROTOCOL["tests"]
    ]
    protocol = {**PROTOCOL, "seeds": {"count": 2000, "offset": 0}, "tests": tests}
    samples = simulate(world, 2000, np.random.default_rng(1))
    row = next(
        r for r in evaluate_frames(protocol, samples, ref).tests if r.test == "t1_speculative"
    )
    ps = [g.pvalue for g in row.detail.per_group]
    assert row.pvalue_method == "Simes over 4 groups" and "Simes" in row.detail.combination
    assert row.pvalue == pytest.approx(simes(ps).pvalue)
    assert row.pvalue <= bonferroni(ps).pvalue
