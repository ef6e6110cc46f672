"""categorical(probs, u): inverse CDF with a float64 CDF, always a positive-weight token."""

from __future__ import annotations

import math

import pytest
import torch

from engine_under_test.sampling import categorical
from tests.engine.helpers import forbid_host_reads

JUST_BELOW_ONE = 1.0 - 2.0**-53  # the largest float64 below 1 (the generator's maximum)


def draw(weights, us, dtype=torch.float32):
    """categorical of one weight row at several uniforms -> list of tokens."""
    probs = torch.tensor(weights, dtype=dtype).expand(len(us), -1)
    return categorical(probs, torch.tensor(us, dtype=torch.float64)).tolist()


def test_u_exactly_at_cdf_boundaries_picks_the_next_token():
    # Token i owns [cdf[i-1], cdf[i]): a boundary belongs to the token that starts there.
    weights = [0.25, 0.25, 0.5]
    assert draw(weights, [0.0, 0.25, 0.5]) == [0, 1, 2]
    below = [math.nextafter(0.25, 0.0), math.nextafter(0.5, 0.0)]
    assert draw(weights, below) == [0, 1]
    assert draw(weights, [JUST_BELOW_ONE]) == [2]


def test_zero_weight_tokens_are_never_chosen():
    # u = 0.5 lands exactly on the boundary after token 0; the zero-weight token 1 has
    # the same cdf and must be skipped.
    assert draw([0.5, 0.0, 0.5], [0.5, math.nextafter(0.5, 0.0), 0.0]) == [2, 0, 0]
    # Leading zeros: u = 0 picks the first positive token, not index 0.
    assert draw([0.0, 0.0, 1.0, 0.0], [0.0, 0.3, JUST_BELOW_ONE]) == [2, 2, 2]


def test_huge_zero_tail_after_the_support():
    V = 1_000_000
    probs = torch.zeros(4, V)
    probs[:, :3] = torch.tensor([0.2, 0.3, 0.5])
    u = torch.tensor([0.0, 0.2, 0.5 - 1e-12, JUST_BELOW_ONE], dtype=torch.float64)
    assert categorical(probs, u).tolist() == [0, 1, 1, 2]


def test_float32_rows_that_do_not_sum_to_one():
    # float32 softmax mass is 1 only up to rounding; u just below 1 must stay in support.
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=g) * 3
    logits[:, 500:] = float("-inf")  # a zero tail
    probs = torch.softmax(logits, -1)
    tokens = categorical(probs, torch.full((64,), JUST_BELOW_ONE, dtype=torch.float64))
    assert (probs.gather(1, tokens[:, None]) > 0).all()
    assert (tokens < 500).all()


def test_target_at_or_past_the_total_returns_the_last_positive_token():
    # u = 1.0 is outside the contract's [0, 1), but it is how rounding "past the end"
    # looks; the draw must still return a token of positive weight.
    assert draw([0.3, 0.7, 0.0, 0.0], [1.0]) == [1]
    assert draw([0.0, 0.4, 0.0, 0.6, 0.0], [1.0]) == [3]


def test_one_token_support_returns_that_token():
    us = [0.0, 0.25, 0.5, JUST_BELOW_ONE]
    assert draw([0.0, 0.0, 1.0, 0.0, 0.0], us) == [2, 2, 2, 2]
    assert draw([0.0, 0.0, 3e-41, 0.0], us) == [2, 2, 2, 2]  # a float32 subnormal


def test_unnormalised_weights():
    assert draw([2.0, 6.0], [0.0, math.nextafter(0.25, 0.0), 0.25, 0.9]) == [0, 0, 1, 1]
    assert draw([2.0, 6.0], [0.2, 0.3], dtype=torch.float64) == [0, 1]


def test_negative_weights_count_as_zero():
    assert draw([-1.0, 1.0, -0.5], [0.0, 0.5, JUST_BELOW_ONE]) == [1, 1, 1]


def test_invalid_rows_still_give_an_in_range_index():
    probs = torch.tensor([[float("nan"), 1.0, 0.0], [0.0, 0.0, 0.0], [float("inf"), 1.0, 0.0]])
    tokens = categorical(probs, torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64))
    assert ((tokens >= 0) & (tokens < 3)).all()


def test_grid_of_uniforms_reproduces_the_weights():
    # Quadrature: on a midpoint grid of N uniforms each token's share is its weight
    # within 1/N: the draw realises the law, not merely a plausible token.
    weights = torch.tensor([0.1, 0.0, 0.35, 0.05, 0.0, 0.5], dtype=torch.float64)
    N = 20_000
    u = (torch.arange(N, dtype=torch.float64) + 0.5) / N
    tokens = categorical(weights.expand(N, -1), u)
    share = torch.bincount(tokens, minlength=6).double() / N
    assert (share - weights).abs().max() <= 1.0 / N
    assert share[1] == 0 and share[4] == 0


def test_probs_float32_and_float64_agree():
    g = torch.Generator().manual_seed(4)
    probs = torch.softmax(torch.randn(200, 50, generator=g), -1)
    u = torch.rand(200, dtype=torch.float64, generator=g)
    assert torch.equal(categorical(probs, u), categorical(probs.double(), u))


def test_makes_no_host_reads(monkeypatch):
    probs = torch.softmax(torch.randn(5, 9, generator=torch.Generator().manual_seed(1)), -1)
    u = torch.linspace(0, 0.99, 5, dtype=torch.float64)
    forbid_host_reads(monkeypatch, "in categorical")
    categorical(probs, u)


@pytest.mark.parametrize(
    "probs, u, message",
    [
        (torch.ones(4), torch.zeros(1, dtype=torch.float64), "probs must be \\[B, V\\]"),
        (torch.ones(2, 4, dtype=torch.int64), torch.zeros(2, dtype=torch.float64), "floating"),
        (torch.ones(2, 0), torch.zeros(2, dtype=torch.float64), "V >= 1"),
        (torch.ones(2, 4), torch.zeros(3, dtype=torch.float64), "u must be \\[B\\]"),
        (torch.ones(2, 4), torch.zeros(2, dtype=torch.int64), "u must be a floating"),
        (torch.ones(2, 4), torch.zeros(2, dtype=torch.float64, device="meta"), "same device"),
    ],
)
def test_validates_host_arguments(probs, u, message):
    with pytest.raises(ValueError, match=message):
        categorical(probs, u)


def test_leaves_its_input_untouched():
    # The draw works in place on its own float64 copy, never on the caller's weights.
    g = torch.Generator().manual_seed(6)
    for probs in (
        torch.rand(5, 30, generator=g) - 0.2,
        (torch.rand(5, 30, generator=g) - 0.2).double(),
    ):
        before = probs.clone()
        categorical(probs, torch.rand(5, dtype=torch.float64, generator=g))
        assert torch.equal(probs, before)
