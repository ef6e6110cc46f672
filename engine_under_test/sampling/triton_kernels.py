"""Fused Triton kernels for the CUDA path (imported lazily by `_dispatch`, CUDA only).

Two kernels, each a drop-in for a torch path it is tested against
(tests/engine/test_sampling_gpu.py):

* `masked_logits`: the memory-bound middle of `batched_probabilities`. The thresholds
  that need a sort (the top-k logit, the top-p (prob, index) pair) come from torch;
  this kernel reads the logits once, scales them by the temperature (IEEE division,
  as torch), masks them against those per-row thresholds and writes the kept logits
  with -inf elsewhere (greedy rows: 0 at the argmax, -inf elsewhere), replacing the
  torch path's chain of compare/and/or/where launches. torch.softmax then finishes,
  so the result is bit-identical to the torch path. The softmax is deliberately not
  fused: a Triton softmax sums in another order than torch's and differed by up to
  2.4e-7 (measured on an H200, V = 49,152), against the reference's 1e-7 bound, and
  the fused version was no faster (the two sorts dominate).
* `philox_uniforms`: Philox4x32-10 in native uint32 arithmetic, one program per
  (row, block of counters). Integer ops and an exact float64 conversion: bit-identical
  to the torch-ops version and about 100x faster (one launch instead of hundreds).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine_under_test.sampling.rng import (
    DOMAIN,
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_ROUNDS,
    PHILOX_W0,
    PHILOX_W1,
)

_MASK_BLOCK = 1024
_PHILOX_BLOCK = 128


@triton.jit
def _masked_logits_kernel(logits_ptr, stride_logits, pk_ptr, stride_pk, out_ptr, stride_out,
                          temperature_ptr, kth_ptr, last_prob_ptr, last_index_ptr, greedy_ptr,
                          V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_row = cols < V
    t = tl.load(temperature_ptr + row)
    kth = tl.load(kth_ptr + row)
    last_prob = tl.load(last_prob_ptr + row)
    last_index = tl.load(last_index_ptr + row)
    greedy = tl.load(greedy_ptr + row)  # the argmax on greedy rows, -1 elsewhere

    x = tl.load(logits_ptr + row * stride_logits + cols, mask=in_row, other=0.0)
    x = tl.div_rn(x.to(tl.float32), t)  # correctly rounded, as torch's float32 division
    pk = tl.load(pk_ptr + row * stride_pk + cols, mask=in_row, other=0.0)
    # Top-k: every logit >= the k-th largest. Top-p: the stable-sort prefix, i.e.
    # (prob, -index) >= (last_prob, -last_index).
    keep = (x >= kth) & ((pk > last_prob) | ((pk == last_prob) & (cols <= last_index)))
    kept = tl.where(keep, x, float("-inf"))
    # Greedy rows: softmax of (0 at the argmax, -inf elsewhere) is exactly the one-hot.
    kept = tl.where(greedy >= 0, tl.where(cols == greedy, 0.0, float("-inf")), kept)
    tl.store(out_ptr + row * stride_out + cols, kept, mask=in_row)


def masked_logits(logits: torch.Tensor, temperature: torch.Tensor, kth: torch.Tensor,
                  probs_k: torch.Tensor, last_prob: torch.Tensor, last_index: torch.Tensor,
                  greedy_index: torch.Tensor) -> torch.Tensor:
    """Fused scale + mask: the logits whose softmax is `batched_probabilities`.

    logits,        # [B, V] float32/bf16/fp16 CUDA (read only)
    temperature,   # [B] float32, 1.0 on greedy rows (never 0)
    kth,           # [B] float32 top-k threshold on scaled logits (-inf: off)
    probs_k,       # [B, V] float32 softmax of the top-k-filtered scaled logits
    last_prob,     # [B] float32 } top-p: keep i iff probs_k[i] > last_prob or
    last_index,    # [B] int64   }   (probs_k[i] == last_prob and i <= last_index)
    greedy_index,  # [B] int64 argmax on greedy rows, -1 elsewhere
    returns        # [B, V] float32: scaled kept logits, -inf elsewhere
    """
    if logits.dtype == torch.float64:
        logits = logits.float()  # the kernel loads 16/32-bit floats; float64 -> float32 first
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    probs_k = probs_k.contiguous()
    B, V = logits.shape
    out = torch.empty((B, V), dtype=torch.float32, device=logits.device)
    if B == 0:
        return out
    grid = (B, triton.cdiv(V, _MASK_BLOCK))
    _masked_logits_kernel[grid](
        logits, logits.stride(0), probs_k, probs_k.stride(0), out, out.stride(0),
        temperature.contiguous(), kth.contiguous(), last_prob.contiguous(),
        last_index.contiguous(), greedy_index.contiguous(), V, BLOCK=_MASK_BLOCK,
    )
    return out


@triton.jit
def _philox_kernel(seed_ptr, round_ptr, out_ptr, n, stride_out, BLOCK: tl.constexpr,
                   M0: tl.constexpr, M1: tl.constexpr, W0: tl.constexpr, W1: tl.constexpr,
                   ROUNDS: tl.constexpr, DOMAIN_WORD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    index = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # counter index, 2 uniforms each
    seed = tl.load(seed_ptr + row)
    rnd = tl.load(round_ptr + row)
    zero = tl.zeros([BLOCK], dtype=tl.uint32)
    k0 = zero + (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = zero + ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = index.to(tl.uint32)
    c1 = zero + (rnd & 0xFFFFFFFF).to(tl.uint32)
    c2 = zero + ((rnd >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c3 = zero + DOMAIN_WORD
    m0 = zero + M0
    m1 = zero + M1
    for _ in tl.static_range(ROUNDS):
        hi0 = tl.umulhi(c0, m0)
        lo0 = c0 * m0  # uint32 arithmetic wraps: the low word of the product
        hi1 = tl.umulhi(c2, m1)
        lo1 = c2 * m1
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + W0  # the bump after the last round is unused
        k1 = k1 + W1
    scale = 1.0 / 9007199254740992.0  # 2**-53
    u0 = ((c0 >> 5).to(tl.float64) * 67108864.0 + (c1 >> 6).to(tl.float64)) * scale
    u1 = ((c2 >> 5).to(tl.float64) * 67108864.0 + (c3 >> 6).to(tl.float64)) * scale
    out_row = out_ptr + row * stride_out
    first = 2 * index.to(tl.int64)
    tl.store(out_row + first, u0, mask=first < n)
    tl.store(out_row + first + 1, u1, mask=first + 1 < n)


def philox_uniforms(seeds: torch.Tensor, rounds: torch.Tensor, n: int) -> torch.Tensor:
    """Philox4x32-10 uniforms, bit-identical to rng.philox_uniforms_torch.

    seeds,    # [B] int64 CUDA
    rounds,   # [B] int64 CUDA
    returns   # [B, n] float64
    """
    B = seeds.shape[0]
    out = torch.empty((B, n), dtype=torch.float64, device=seeds.device)
    n_counters = (n + 1) // 2
    if B == 0 or n == 0:
        return out
    grid = (B, triton.cdiv(n_counters, _PHILOX_BLOCK))
    _philox_kernel[grid](
        seeds.contiguous(), rounds.contiguous(), out, n, out.stride(0), BLOCK=_PHILOX_BLOCK,
        M0=PHILOX_M0, M1=PHILOX_M1, W0=PHILOX_W0, W1=PHILOX_W1, ROUNDS=PHILOX_ROUNDS,
        DOMAIN_WORD=DOMAIN,
    )
    return out
