"""Inverse-CDF sampling from rows of non-negative weights, driven by given uniforms.

The randomness is an argument (one float64 uniform per row), not a generator: the
caller owns it (RngRegistry, or a quadrature grid in specconform's kernel protocols),
so the draw is a pure function of (weights, u).

Token i is chosen for u in [cdf[i-1] / total, cdf[i] / total), computed as: target =
u * total, index = first i with cdf[i] > target (`torch.searchsorted(..., right=True)`).
A token of zero weight adds exactly 0 to a float64 running sum, so its cdf equals its
predecessor's and "first cdf > target" can never land on it: zero-mass tokens, zero
tails included, are never chosen. The one case the rule leaves open is a target that
rounds to >= total (u just below 1): the draw then returns the last token of positive
weight, never an index past the support or past V.
"""

from __future__ import annotations

import torch

from engine_under_test.sampling._checks import (
    require_law,
    require_same_device,
    require_shape,
    require_tensors,
)
from engine_under_test.sampling._dispatch import sampling_kernel_for


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row: the inverse CDF of the row's weights at u.

    probs,    # [B, V] float32 or float64, rows of weights >= 0 (need not sum to 1;
              #        negative entries are treated as 0)
    u,        # [B] float64 in [0, 1)
    returns   # [B] int64, a token of positive weight for every row with positive
              #      finite mass (rows without are the caller's error; they still get
              #      an index in [0, V))

    No host reads.
    """
    require_tensors(probs=probs, u=u)
    B, V = require_law("probs", probs, 2, "[B, V]")
    require_shape("u", u, (B,), "[B]", "float")
    require_same_device("probs", probs, u=u)
    kernel = sampling_kernel_for("categorical", probs)  # Triton on CUDA (_dispatch)
    if kernel is not None:
        return kernel(probs, u)

    # float64 cdf: float32 -> float64 is exact, running sums carry ~1e-16 relative
    # rounding instead of float32's ~1e-7, and a zero weight adds exactly zero.
    # A fresh float64 copy (never the caller's tensor), then everything in place.
    weights = probs.to(torch.float64, copy=True)
    # The last token of positive weight, read before the copy becomes the cdf (NaN is
    # not > 0; with no positive weight it is 0, as the clamp below made it before).
    last_positive = _last_positive(probs)
    weights.clamp_min_(0.0)  # keeps NaN, which stays an error
    return _draw(weights, u, last_positive)


def _last_positive(weights: torch.Tensor) -> torch.Tensor:
    """[B] int64: the largest index of a weight > 0 in each row (0 when there is none)."""
    V = weights.shape[-1]
    columns = torch.arange(1, V + 1, dtype=torch.int32, device=weights.device)
    return ((weights > 0) * columns).amax(dim=-1).to(torch.int64).sub_(1).clamp_min_(0)


def _draw(weights: torch.Tensor, u: torch.Tensor, last_positive: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw on float64 weights >= 0 (or NaN) that this module owns:
    `weights` is turned into its cdf in place."""
    V = weights.shape[-1]
    cdf = weights.cumsum_(dim=-1)
    total = cdf[:, -1:]
    # clamp: a (invalid) negative u must not pick a leading zero-weight token either.
    target = (u.double()[:, None] * total).clamp_min(0.0)
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # first cdf > target
    # target >= total (rounding with u near 1): fall back to the last positive token.
    index = torch.where(index >= V, last_positive, index)
    return index.clamp(0, V - 1)
