"""The serial reference law of many rows at once, under one SamplingParams.

`Sampler.probabilities` loops over rows in Python, one row of step-by-step torch
operations at a time; on CUDA every row is a dozen launches and a host read (the top-p
cut), so the laws of a 384-token generation (teacher forcing: one row per committed
token, p and q) took ~0.5 s a request on an H100 -- 186 s of protocols/sequence.yaml
(docs/gpu-runs.md, 2026-12-07 night). ``reference_rows`` takes the same five steps
(module docstring of probabilities.py) along the last dimension of [N, V] at once, with
no host read. It is written apart from `batched_probabilities` (the engine's production
path, per-row parameters, Triton on CUDA) on purpose: specconform's reference laws must
not share code with what they test.

Equal to the row loop bit for bit on CPU (sort values, softmax and the float64 cumsum are
computed row by row in the same order; tests/engine/test_reference_rows.py over ties at
the k-th value and top-p cuts); on CUDA the cumsum along a row of [N, V] may round in
another order than a lone row's, which can move the top-p cut only where the float64
running sum lies within an ulp of top_p (the teacher_forcing check of a sequence run
compares a pre-registered sample of these laws with the one-prefix replay).
"""

from __future__ import annotations

import torch

from engine_under_test.params import to_float32

NEG_INF = float("-inf")
CHUNK_ROWS = 128  # rows per pass: a pass holds ~24 bytes a logit (sort, order, cumsum)


def reference_rows(logits: torch.Tensor, temperature: float, top_k: int, top_p: float):
    """The law of every row of ``logits`` under one (temperature, top_k, top_p).

    logits,   # [N, V] float32/bf16/fp16/float64 (float64 is rounded to float32)
    returns   # [N, V] float32, a new tensor; row i = Sampler.probabilities(logits[i])
    """
    if logits.shape[0] <= CHUNK_ROWS:
        return _rows(logits, temperature, top_k, top_p)
    return torch.cat(
        [_rows(chunk, temperature, top_k, top_p) for chunk in logits.split(CHUNK_ROWS)]
    )


def _rows(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    x = logits.float()
    N, V = x.shape
    device = x.device
    t32 = to_float32(temperature)
    if t32 == 0.0:  # greedy: the one-hot of the first maximal index
        out = torch.zeros(N, V, dtype=torch.float32, device=device)
        return out.scatter_(1, torch.argmax(x, dim=-1, keepdim=True), 1.0)
    # A device tensor divisor, as the row path: CUDA turns division by a host scalar
    # into multiplication by its reciprocal, which can differ in the last bit.
    x = x / torch.tensor(t32, dtype=torch.float32, device=device)
    if 0 < top_k < V:
        kth = torch.sort(x, dim=-1, descending=True).values[:, top_k - 1 : top_k]  # [N, 1]
        x = torch.where(x >= kth, x, NEG_INF)  # >= keeps every tie of the k-th value
    p32 = to_float32(top_p)
    if p32 < 1.0:
        probs = torch.softmax(x, dim=-1)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        reached = torch.cumsum(sorted_probs.double(), dim=-1) >= p32  # [N, V] bool
        # The row path keeps the first index where the running mass reaches top_p, and
        # every token when none does (argmax returns the first maximal index).
        first = reached.to(torch.int8).argmax(dim=-1)
        n_keep = torch.where(reached.any(dim=-1), first + 1, V)  # [N]
        kept_rank = torch.arange(V, device=device) < n_keep[:, None]  # [N, V] by rank
        keep = torch.zeros_like(kept_rank).scatter_(1, order, kept_rank)  # by token
        x = torch.where(keep, x, NEG_INF)
    return torch.softmax(x, dim=-1)
