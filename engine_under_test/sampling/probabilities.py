"""Probability laws from logits: the serial reference and the batched device path.

One law, two implementations:

* `Sampler.probabilities` is the serial, row-wise reference. It loops over rows in
  Python, may read values on the host, and is written for clarity. specconform replays
  it to get the target law p that committed tokens are tested against.
* `batched_probabilities` computes the same law for a batch with per-row parameters in
  one pass: no Python loop over rows, no host reads, inputs never modified. The engine
  uses it on every path, the async one included.

The law, for one row of logits x with temperature T, top_k k and top_p P:

1. T == 0 (in float32): greedy, the one-hot of argmax x (lowest index on ties).
2. Otherwise x = float32(x) / float32(T), an IEEE float32 division.
3. Top-k (0 < k < V): keep every logit >= the k-th largest. Ties survive, so more than
   k tokens may be kept.
4. Top-p (P < 1): take the float32 softmax of the top-k-filtered logits, sort it
   descending with a stable sort (ties: lower index first), sum it in float64 and keep
   the smallest prefix whose mass reaches P; the first token is always kept.
5. Softmax in float32 over the kept logits (the others set to -inf).

The batched path must equal the reference row by row (same support, same
probabilities). Both use the same torch operations along the last dimension, and those
compute each row independently of its batch, so on CPU they agree bit for bit. The
batched path finds the top-p prefix without a scatter: in the stable order a token is
kept iff (prob, -index) >= (prob, -index) of the last kept token, one per-row threshold
pair that a fused kernel can apply too.
"""
from __future__ import annotations

import torch

from engine_under_test.params import SamplingParams, to_float32
from engine_under_test.sampling._checks import (
    require_device,
    require_float,
    require_integer,
    require_ndim,
    require_shape,
    require_tensor,
)
from engine_under_test.sampling._dispatch import triton_kernels_for

NEG_INF = float("-inf")

# --------------------------------------------------------------------------- reference


def _reference_row(logits: torch.Tensor, temperature: float, top_k: int,
                   top_p: float) -> torch.Tensor:
    """One row of the law, written step by step.

    logits,       # [V] float32/bf16/fp16/float64
    returns       # [V] float32
    """
    x = logits.float()
    V = x.shape[0]
    t32 = to_float32(temperature)
    if t32 == 0.0:
        out = torch.zeros(V, dtype=torch.float32, device=x.device)
        out[int(torch.argmax(x))] = 1.0  # argmax returns the first maximal index
        return out

    # A device tensor divisor, not a Python float: CUDA turns division by a host
    # scalar into multiplication by its reciprocal, which can differ in the last bit.
    x = x / torch.tensor(t32, dtype=torch.float32, device=x.device)

    if 0 < top_k < V:
        kth = torch.sort(x, descending=True).values[top_k - 1]
        x = torch.where(x >= kth, x, NEG_INF)  # >= keeps every tie of the k-th value

    p32 = to_float32(top_p)
    if p32 < 1.0:
        probs = torch.softmax(x, dim=-1)
        sorted_probs, order = torch.sort(probs, descending=True, stable=True)
        cumulative = torch.cumsum(sorted_probs.double(), dim=-1)
        reached = torch.nonzero(cumulative >= p32)
        n_keep = int(reached[0, 0]) + 1 if reached.numel() else V
        keep = torch.zeros(V, dtype=torch.bool, device=x.device)
        keep[order[:n_keep]] = True
        x = torch.where(keep, x, NEG_INF)

    return torch.softmax(x, dim=-1)


class Sampler:
    """The serial reference law (see the module docstring)."""

    @staticmethod
    def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """Probabilities of each row of `logits` under `params`, row by row.

        logits,   # [V] or [N, V] float32/bf16/fp16 (float64 is rounded to float32)
        params,   # SamplingParams
        returns   # same shape as logits, float32, rows sum to 1
        """
        require_tensor("logits", logits)
        require_float("logits", logits)
        if logits.dim() not in (1, 2):
            raise ValueError(f"logits must be [V] or [N, V], got shape {tuple(logits.shape)}")
        if logits.shape[-1] < 1:
            raise ValueError("logits must have a vocabulary of at least one token (V >= 1)")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        args = (params.temperature, params.top_k, params.top_p)
        if logits.dim() == 1:
            return _reference_row(logits, *args)
        rows = [_reference_row(logits[i], *args) for i in range(logits.shape[0])]
        if not rows:
            return torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        return torch.stack(rows)


# ----------------------------------------------------------------------------- batched


def _check_batched(logits, temperature, top_k, top_p) -> None:
    for name, t in (("logits", logits), ("temperature", temperature), ("top_k", top_k),
                    ("top_p", top_p)):
        require_tensor(name, t)
    require_ndim("logits", logits, 2, "[B, V]")
    require_float("logits", logits)
    B, V = logits.shape
    if V < 1:
        raise ValueError("logits must have a vocabulary of at least one token (V >= 1)")
    require_shape("temperature", temperature, (B,), "[B]")
    require_float("temperature", temperature)
    require_shape("top_k", top_k, (B,), "[B]")
    require_integer("top_k", top_k)
    require_shape("top_p", top_p, (B,), "[B]")
    require_float("top_p", top_p)
    for name, t in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
        require_device(name, t, logits.device, "logits")


def top_k_threshold(x: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """The k-th largest scaled logit of each row, -inf where top-k is off.

    x,        # [B, V] float32 scaled logits
    top_k,    # [B] int64 (<= 0 or >= V: off)
    returns   # [B] float32; keep token i iff x[i] >= threshold
    """
    V = x.shape[-1]
    sorted_x = torch.sort(x, dim=-1, descending=True).values  # values: order of ties moot
    position = (top_k - 1).clamp(0, V - 1)
    kth = sorted_x.gather(-1, position[:, None]).squeeze(-1)
    on = (top_k > 0) & (top_k < V)
    return torch.where(on, kth, NEG_INF)


def top_p_threshold(x_k: torch.Tensor, top_p: torch.Tensor):
    """The last kept token of each row's top-p prefix, as a (prob, index) pair.

    x_k,      # [B, V] float32 scaled logits after top-k (-inf where filtered)
    top_p,    # [B] float32 (>= 1: off)
    returns   (probs_k,     # [B, V] float32 softmax of x_k, the law top-p sorts
               last_prob,   # [B] float32 prob of the last kept token in stable order
               last_index)  # [B] int64 its index
    Token i is kept iff probs_k[i] > last_prob or (== last_prob and i <= last_index):
    exactly the prefix of the stable descending sort (ties: lower index first).
    """
    V = x_k.shape[-1]
    probs_k = torch.softmax(x_k, dim=-1)
    sorted_probs, order = torch.sort(probs_k, dim=-1, descending=True, stable=True)
    cumulative = torch.cumsum(sorted_probs.double(), dim=-1)
    # Float64 running sums never decrease, so the positions whose mass is still below
    # top_p form a prefix of some length c; the smallest prefix that reaches top_p adds
    # the next position: c + 1 tokens (all V when no prefix reaches it). At least one.
    below = (cumulative < top_p.double()[:, None]).sum(dim=-1)
    n_keep = (below + 1).clamp_max(V)
    # top_p >= 1 is off: keep all V even when float64 rounding reaches 1 early.
    n_keep = torch.where(top_p >= 1.0, V, n_keep)
    last = (n_keep - 1)[:, None]
    last_prob = sorted_probs.gather(-1, last).squeeze(-1)
    last_index = order.gather(-1, last).squeeze(-1)
    return probs_k, last_prob, last_index


def batched_probabilities(logits: torch.Tensor, temperature: torch.Tensor,
                          top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The law of `Sampler.probabilities` for every row at once, per-row parameters.

    logits,       # [B, V] float32/bf16/fp16 (never modified; float64 is rounded to float32)
    temperature,  # [B] float32 (0 => greedy one-hot of argmax; other float dtypes are
                  #     rounded to float32)
    top_k,        # [B] int64 (<= 0 => off)
    top_p,        # [B] float32 (1.0 => off)
    returns       # [B, V] float32, a new tensor

    No host reads: safe on the async path and under CUDA Graph capture. Parameter
    values are not validated (that would read them); SamplingParams validates them
    at admission.
    """
    _check_batched(logits, temperature, top_k, top_p)
    V = logits.shape[1]
    t = temperature.to(torch.float32)
    greedy = t == 0.0
    t_safe = torch.where(greedy, torch.ones_like(t), t)  # greedy rows: no division by 0
    # Out of place only: .float() returns the input itself when it is float32 already.
    x = logits.float() / t_safe[:, None]

    kth = top_k_threshold(x, top_k.to(torch.int64))
    x_k = torch.where(x >= kth[:, None], x, NEG_INF)
    probs_k, last_prob, last_index = top_p_threshold(x_k, top_p.to(torch.float32))
    greedy_index = torch.argmax(x, dim=-1)  # t_safe == 1 on greedy rows: argmax of logits

    kernels = triton_kernels_for(logits)
    if kernels is not None:  # CUDA: fused scale + mask, bit-identical to the lines below
        kept = kernels.masked_logits(logits, t_safe, kth, probs_k, last_prob, last_index,
                                     torch.where(greedy, greedy_index, -1))
        return torch.softmax(kept, dim=-1)

    columns = torch.arange(V, device=logits.device)
    keep = (x >= kth[:, None]) & (
        (probs_k > last_prob[:, None])
        | ((probs_k == last_prob[:, None]) & (columns <= last_index[:, None]))
    )
    probs = torch.softmax(torch.where(keep, x, NEG_INF), dim=-1)
    one_hot = torch.zeros_like(probs).scatter_(-1, greedy_index[:, None], 1.0)
    return torch.where(greedy[:, None], one_hot, probs)
