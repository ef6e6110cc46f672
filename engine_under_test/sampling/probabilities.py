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

Where the batched path runs:

* CUDA with Triton (the default there): one fused kernel per call
  (`triton_kernels.probabilities`), no sort of the vocabulary; the same support as the
  reference and probabilities within 1e-6 of it (exp and sums in another order than
  torch's softmax).
* Everywhere else (CPU, or Triton switched off): torch operations, bit for bit equal to
  the reference. Two keyword-only host hints, which the engine can give because it
  knows every row's SamplingParams, take the full-row sorts out:
  - ``max_top_k=C`` (every non-greedy row has 0 < top_k <= C): the k-th value comes
    from torch.topk(C) (the same values as the sort), and the top-p cut from those C
    candidates: the kept tokens of prob above p_min (the prob of the k-th value) are
    all candidates, sorted by (prob desc, index asc) and summed in float64 in the
    reference's order; the tie group at p_min, which may be wider than C, continues
    with equal terms, and its c-th member by index is found on the whole row. Past the
    candidates, the running sum s + i * p_min is computed in one step; it is the
    reference's sequential sum exactly when p_min >= 2**-29, because every term is a
    float32 >= p_min, so every partial sum is a multiple of p_min's float32 ulp below
    2**53 of them;
  - ``any_top_p=False`` (no non-greedy row has top_p < 1): the top-p step is skipped.
"""

from __future__ import annotations

import torch

from engine_under_test.params import SamplingParams, to_float32
from engine_under_test.sampling._checks import (
    require_float,
    require_law,
    require_same_device,
    require_shape,
    require_tensor,
    require_tensors,
)
from engine_under_test.sampling._dispatch import triton_kernels_for
from engine_under_test.sampling.reference_rows import reference_rows

NEG_INF = float("-inf")

# --------------------------------------------------------------------------- reference


def _reference_row(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
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
    def probabilities_of_rows(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """``probabilities`` of every row of ``logits`` [N, V] at once (reference_rows.py:
        the same steps along the last dimension, no host read, no Python row loop).
        Returns [N, V] float32."""
        require_tensor("logits", logits)
        require_float("logits", logits)
        if logits.dim() != 2 or logits.shape[-1] < 1:
            raise ValueError(f"logits must be [N, V] with V >= 1, got shape {tuple(logits.shape)}")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        return reference_rows(logits, params.temperature, params.top_k, params.top_p)

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
    require_tensors(logits=logits, temperature=temperature, top_k=top_k, top_p=top_p)
    B, V = require_law("logits", logits, 2, "[B, V]")
    require_shape("temperature", temperature, (B,), "[B]", "float")
    require_shape("top_k", top_k, (B,), "[B]", "integer")
    require_shape("top_p", top_p, (B,), "[B]", "float")
    require_same_device("logits", logits, temperature=temperature, top_k=top_k, top_p=top_p)


def _check_hints(max_top_k, any_top_p) -> None:
    if max_top_k is not None and (
        isinstance(max_top_k, bool) or not isinstance(max_top_k, int) or max_top_k < 1
    ):
        raise ValueError(f"max_top_k must be None or an int >= 1, got {max_top_k!r}")
    if not isinstance(any_top_p, bool):
        raise ValueError(f"any_top_p must be a bool, got {any_top_p!r}")


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


def _top_p_cut_sorted(probs_k: torch.Tensor, top_p: torch.Tensor):
    """(last_prob, last_index) of the top-p prefix by a stable sort of the whole row."""
    V = probs_k.shape[-1]
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
    return last_prob, last_index


def _top_p_cut_candidates(probs_k, kept, top_p, top_values, top_indices, top_k):
    """(last_prob, last_index) of the top-p prefix from the top-k candidates only.

    probs_k,      # [B, V] float32 softmax of the top-k-filtered logits
    kept,         # [B, V] bool, the top-k kept set (x >= the k-th value)
    top_p,        # [B] float32
    top_values,   # [B, C] torch.topk(x, C) values, descending, C >= every top_k
    top_indices,  # [B, C] their indices
    top_k,        # [B] int64, 0 < top_k <= C on every row that matters

    The stable descending order of probs_k is: the kept tokens of prob > p_min (all
    of them candidates: their logits exceed the k-th value), then the group G of
    prob == p_min (the prob of the k-th value) by index, then zeros. The candidates
    give the first part exactly (sorted by (prob desc, index asc), float64 cumsum in
    the same order as the reference). G may hold more tokens than the candidates
    (ties at the k-th value past C); its running sums continue with equal terms
    p_min, and its c-th member by index is found on the whole row.
    """
    B, V = probs_k.shape
    C = top_values.shape[-1]
    p64 = top_p.double()
    cand_p = probs_k.gather(-1, top_indices)  # [B, C]
    kth = top_values.gather(-1, (top_k - 1).clamp(0, C - 1)[:, None])  # [B, 1]
    cand_kept = top_values >= kth
    p_min = cand_p.gather(-1, (top_k - 1).clamp(0, C - 1)[:, None])  # [B, 1]
    # (prob desc, index asc): order by index, then a stable sort by prob.
    by_index, perm = torch.sort(top_indices, dim=-1)
    sorted_p, order = torch.sort(cand_p.gather(-1, perm), dim=-1, descending=True, stable=True)
    sorted_index = by_index.gather(-1, order)
    cumulative = torch.cumsum(sorted_p.double(), dim=-1)
    n_cand = cand_kept.sum(dim=-1)  # kept candidates
    positions = torch.arange(C, device=probs_k.device)
    below = ((cumulative < p64[:, None]) & (positions < n_cand[:, None])).sum(dim=-1)
    g0 = (cand_kept & (cand_p > p_min)).sum(dim=-1)  # G starts here
    n_group = kept.sum(dim=-1) - g0  # |G| on the whole row
    # Cut before G, or inside G's candidate part: read it off the sorted candidates.
    at = below.clamp_max(C - 1)[:, None]
    last_prob = sorted_p.gather(-1, at).squeeze(-1)
    last_index = sorted_index.gather(-1, at).squeeze(-1)
    # Inside G (or past it): keep the first c members of G by index. While the sum
    # is still in the candidates, c comes from their cumsum; past them, the terms
    # are all p_min and the running sum s + i * p_min is the reference's sequential
    # float64 sum for p_min >= 2**-29 (see the module docstring).
    reached = below < n_cand
    s_last = cumulative.gather(-1, (n_cand - 1).clamp_min(0)[:, None]).squeeze(-1)
    s_last = torch.where(n_cand > 0, s_last, 0.0)
    pm = p_min.squeeze(-1).double()
    extra = torch.ceil(((p64 - s_last) / pm).clamp(0.0, float(V))).to(torch.int64)
    extra = torch.where(s_last + extra.double() * pm < p64, extra + 1, extra)
    extra = torch.where(
        (extra > 1) & (s_last + (extra - 1).double() * pm >= p64), extra - 1, extra
    ).clamp_min(1)
    c = torch.where(reached, below - g0 + 1, (n_cand - g0) + extra)
    in_group = below >= g0
    group = kept & (probs_k == p_min)
    rank = torch.cumsum(group, dim=-1, dtype=torch.int32)
    nth = (group & (rank == c[:, None].to(torch.int32))).to(torch.uint8).argmax(dim=-1)
    last_prob = torch.where(in_group, p_min.squeeze(-1), last_prob)
    last_index = torch.where(in_group, nth, last_index)
    # Never reached (float rounding below top_p), or top-p off: keep everything.
    keep_all = (in_group & (c > n_group)) | (top_p >= 1.0)
    last_prob = torch.where(keep_all, 0.0, last_prob)
    last_index = torch.where(keep_all, V - 1, last_index)
    return last_prob, last_index


def batched_probabilities(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    *,
    max_top_k: int | None = None,
    any_top_p: bool = True,
) -> torch.Tensor:
    """The law of `Sampler.probabilities` for every row at once, per-row parameters.

    logits,       # [B, V] float32/bf16/fp16 (never modified; float64 is rounded to float32)
    temperature,  # [B] float32 (0 => greedy one-hot of argmax; other float dtypes are
                  #     rounded to float32)
    top_k,        # [B] int64 (<= 0 => off)
    top_p,        # [B] float32 (1.0 => off)
    max_top_k,    # keyword-only host hint, None (default) or an int >= 1 promising
                  #     that every non-greedy row has top-k on with 0 < top_k <= max_top_k
                  #     (the engine knows every row's SamplingParams). The torch path then
                  #     finds the k-th value and the top-p cut from torch.topk(max_top_k)
                  #     instead of sorting whole rows. A broken promise gives a wrong law.
    any_top_p,    # keyword-only host hint, default True; False promises that no
                  #     non-greedy row has top_p < 1, and the top-p step is skipped.
    returns       # [B, V] float32, a new tensor

    No host reads: safe on the async path and under CUDA Graph capture. Parameter
    values are not validated (that would read them); SamplingParams validates them
    at admission. On CUDA the fused Triton kernel serves every row whatever the hints.
    """
    _check_batched(logits, temperature, top_k, top_p)
    _check_hints(max_top_k, any_top_p)
    V = logits.shape[1]
    t = temperature.to(torch.float32)
    kernels = triton_kernels_for(logits)
    if kernels is not None:  # CUDA: one fused launch, no sort (triton_kernels.py)
        return kernels.probabilities(logits, t, top_k, top_p)

    greedy = t == 0.0
    t_safe = torch.where(greedy, torch.ones_like(t), t)  # greedy rows: no division by 0
    # Always a new float32 tensor (the input is never written): float32(logits) / T.
    x = (logits.float() if logits.dtype == torch.float64 else logits) / t_safe[:, None]
    k = top_k.to(torch.int64)
    hint = max_top_k is not None and max_top_k < V
    if hint:
        top_values, top_indices = torch.topk(x, max_top_k, dim=-1, sorted=True)
        position = (k - 1).clamp(0, max_top_k - 1)
        kth = top_values.gather(-1, position[:, None]).squeeze(-1)
        kth = torch.where((k > 0) & (k < V), kth, NEG_INF)
    else:
        kth = top_k_threshold(x, k)
    greedy_index = torch.argmax(x, dim=-1)  # t_safe == 1 on greedy rows: argmax of logits

    # x becomes the top-k-filtered logits in place (x is this call's own tensor). A NaN
    # threshold keeps nothing: greedy rows get their one-hot below.
    kept = x >= torch.where(greedy, float("nan"), kth)[:, None]
    x.masked_fill_(~kept, NEG_INF)
    if any_top_p:
        probs_k = torch.softmax(x, dim=-1)
        p32 = top_p.to(torch.float32)
        if hint:
            last_prob, last_index = _top_p_cut_candidates(
                probs_k, kept, p32, top_values, top_indices, k
            )
        else:
            last_prob, last_index = _top_p_cut_sorted(probs_k, p32)
        columns = torch.arange(V, device=logits.device)
        keep = (probs_k > last_prob[:, None]) | (
            (probs_k == last_prob[:, None]) & (columns <= last_index[:, None])
        )
        x.masked_fill_(keep.logical_not_(), NEG_INF)
    # Greedy rows (all -inf now): a 0 at the argmax, whose softmax is exactly the
    # one-hot of the argmax, whatever the logits' values (NaN and inf included).
    at_argmax = torch.where(greedy[:, None], 0.0, x.gather(-1, greedy_index[:, None]))
    x.scatter_(-1, greedy_index[:, None], at_argmax)
    return torch.softmax(x, dim=-1)
