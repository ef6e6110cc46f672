"""Filter-boundary near-ties of a law comparison (specconform/runner/filter_ties.py): a
support difference at a top-k/top-p threshold inside the numerics model's error is a
near-tie, counted apart; the same difference far from the threshold (a filter bug) stays
a mismatch. Deterministic: fixed laws, no sampling."""

from __future__ import annotations

import numpy as np
import pytest

from specconform.kinds.sequence.numerics import model_at, model_json
from specconform.runner.filter_ties import FilterParams, classify_support
from specconform.runner.sequence_checks import CheckTally

# ci_sequence's stated model at T 1 (protocols/ci_sequence.yaml): logit bound 3.7e-4,
# law bound 1.8e-4.
MODEL = model_at(
    {"dtype": "float32", "reduction_length": 128, "kernels": 73, "logit_scale": 32.0}, 1.0
)
BOUNDS = {"logit_bound": MODEL.logit_bound, "law_bound": MODEL.law_bound}


def _filtered(u: np.ndarray, keep: list[int]) -> np.ndarray:
    out = np.zeros_like(u)
    out[keep] = u[keep] / u[keep].sum()
    return out


def _law(top: float) -> np.ndarray:
    """Token 0 holds ``top``; the rest decreasing."""
    rest = np.array([0.5, 0.3, 0.15, 0.05]) * (1 - top)
    return np.concatenate([[top], rest])


def _classify(u, a_keep, b_keep, top_k=0, top_p=1.0):
    params = FilterParams(top_k, top_p, lambda: u)
    return classify_support(
        _filtered(u, a_keep), _filtered(u, b_keep), params, tolerance=MODEL.law_bound, **BOUNDS
    )


def test_top_p_crossing_within_the_law_bound_is_a_near_tie_and_far_from_it_a_mismatch():
    # The GPU host's case: top_p 0.8, the top token's mass a hair below it. The reference
    # keeps the crossing token 1; an engine that saw 0.80001 keeps token 0 alone.
    near = _classify(_law(0.8 - 5e-5), [0, 1], [0], top_p=0.8)
    assert near.near_tie and near.tokens == (1,) and near.common_diff == 0.0
    # Negative control: the top token at 0.7, the crossing token dropped (an off-by-one
    # top-p filter): outside the error, a mismatch.
    far = _classify(_law(0.7), [0, 1], [0], top_p=0.8)
    assert not far.near_tie and "token 1" in far.why
    # An engine that keeps one token too many, far from the threshold: a mismatch too.
    extra = _classify(_law(0.85), [0], [0, 1], top_p=0.8)
    assert not extra.near_tie


def test_two_tokens_of_equal_mass_at_the_crossing_may_swap():
    u = np.array([0.7, 0.1, 0.1 - 1e-6, 0.1 + 1e-6 - 0.0])
    u = u / u.sum()
    assert _classify(u, [0, 1], [0, 2], top_p=0.75).near_tie
    v = np.array([0.7, 0.15, 0.1, 0.05])  # 0.15 vs 0.1: no swap within the error
    assert not _classify(v, [0, 1], [0, 2], top_p=0.75).near_tie


def test_top_k_boundary_within_two_logit_bounds_is_a_near_tie():
    z = np.array([3.0, 2.0, 2.0 - 1e-4, 0.5, 0.0])  # ranks 2 and 3 within 2 x 3.7e-4
    u = np.exp(z) / np.exp(z).sum()
    assert _classify(u, [0, 1], [0, 2], top_k=2).near_tie
    z[2] = 1.5  # a clear gap of 0.5: an engine keeping token 2 has a top-k bug
    u = np.exp(z) / np.exp(z).sum()
    assert not _classify(u, [0, 1], [0, 2], top_k=2).near_tie


def test_a_near_support_difference_still_needs_the_common_laws_to_agree():
    u = _law(0.8 - 5e-5)
    a, b = _filtered(u, [0, 1, 2]), _filtered(u, [0, 1])
    b[0], b[1] = b[0] + 0.01, b[1] - 0.01  # the common support's law moved by 0.01
    tie = classify_support(a, b, FilterParams(0, 0.9, lambda: u), tolerance=1e-3, **BOUNDS)
    assert not tie.near_tie and "common support" in tie.why


@pytest.mark.parametrize("near", [True, False])
def test_the_tally_counts_a_filter_near_tie_apart_and_a_far_one_as_a_mismatch(near):
    tally = CheckTally("trace", MODEL.law_bound, numerics=model_json(MODEL), near_ties=0)
    u = _law(0.8 - 5e-5 if near else 0.7)
    filters = FilterParams(0, 0.8, lambda: u)
    tally.add_laws(_filtered(u, [0, 1]), _filtered(u, [0, 1]), {"round": 0}, filters)
    tally.add_laws(_filtered(u, [0, 1]), _filtered(u, [0]), {"round": 1}, filters)
    tally.add_laws(u, u, {"round": 2}, FilterParams(0, 1.0, lambda: u))  # no filter
    rec = tally.record()
    assert rec["decisions"] == 2 and rec["checked"] == 3
    assert (rec["near_ties"], rec["mismatches"]) == ((1, 0) if near else (0, 1))
    if near:
        assert rec["near_tie_examples"][0]["filter_tokens"] == [1]
        assert rec["max_abs_diff"] == 0.0  # the common support's laws, not the 0.13
    else:
        assert rec["examples"][0]["outside_error"].startswith("token 1")


def test_dropping_the_kth_token_through_a_clear_gap_is_a_mismatch():
    """A kept token is judged against the (k+1)-th logit, which would have to overtake
    it, not against the k-th (itself): an engine keeping k - 1 tokens (a top-k off by
    one) while the (k+1)-th lies 0.5 below is a mismatch, not a near-tie."""
    z = np.array([3.0, 2.0, 1.5, 0.5, 0.0])
    u = np.exp(z) / np.exp(z).sum()
    assert not _classify(u, [0, 1], [0], top_k=2).near_tie
    z[2] = 2.0 - 1e-4  # the (k+1)-th within 2 logit bounds of the k-th: it may swap
    u = np.exp(z) / np.exp(z).sum()
    tie = classify_support(
        _filtered(u, [0, 1]), _filtered(u, [0, 2]), FilterParams(2, 1.0, lambda: u),
        tolerance=MODEL.law_bound, **BOUNDS,
    )  # fmt: skip
    assert tie.near_tie
