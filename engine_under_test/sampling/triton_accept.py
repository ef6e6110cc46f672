"""Triton kernel for `speculative_accept` (the rule is in accept.py's docstring).

Imported lazily by `_dispatch`. One program per row, one launch for the whole round:

1. the accept coins need only two gathers per draft, p[j, x_j] and q[j, x_j]
   (float64 products and the strict <, as the torch path), so the stop point s comes
   from 2K scalar loads, not from any full row;
2. only the stop point's law is streamed: p[s] for a bonus (s == draft_len), p[s] - q[s]
   for a rejection (q's row is not read for a bonus: a masked load reads no memory),
   through `triton_categorical._inverse_cdf` (one full read of the row or rows, then one
   tile again), which also counts the non-finite entries before the clamp: the row's
   error flag is "non-finite entry or no positive mass", the torch path's test (a
   float64 sum of float32/16-bit values or differences is finite iff every entry is);
3. the committed tokens, counts and flag are written directly.

Equal to the torch path for the committed tokens, counts and flags given the same
uniforms, with the one caveat `triton_categorical` states for the float64 cdf (two
summation orders can round a boundary apart by ~1e-16 relative). The kernel mutants and
float64 p or q stay on the torch path (`_dispatch.sampling_kernel_for`): a float64 row
sum could overflow where every entry is finite.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine_under_test.sampling.triton_categorical import (
    CHUNKS,
    DRAW,
    ROW,
    _row_pass,
    chunk_buffers,
    launch_shape,
    split_shape,
)


@triton.jit
def _stop_point(p_row, q_row, d_row, u_row, lens_ptr, b, sp1, sq1, V, K: tl.constexpr):
    """(stop, rejected) of one row: the run of leading accepts among its drafts."""
    L = tl.minimum(tl.maximum(tl.load(lens_ptr + b).to(tl.int64), 0), K)
    stop = tl.zeros([], tl.int64)
    going = L > 0  # still inside the run of leading accepts
    for j in tl.static_range(K):
        x = tl.load(d_row + j).to(tl.int64)
        in_range = (x >= 0) & (x < V)
        xs = tl.minimum(tl.maximum(x, 0), V - 1)
        pd = tl.load(p_row + j * sp1 + xs).to(tl.float64)
        qd = tl.load(q_row + j * sq1 + xs).to(tl.float64)
        coin = tl.load(u_row + j)
        # NaN in p or q makes the comparison False: a rejection; its law shows the NaN.
        going = going & (j < L) & in_range & (coin * qd < pd)
        stop += going.to(tl.int64)
    return stop, stop < L


@triton.jit
def _write_round(
    tok_row, d_row, nacc_ptr, ncom_ptr, err_ptr, b, stop, token, error, K: tl.constexpr
):
    """Committed tokens (accepted drafts, then the draw, -1 after), counts, error flag."""
    for s in tl.static_range(K + 1):
        if s < K:
            draft = tl.load(d_row + s).to(tl.int64)
        else:
            draft = tl.full([], -1, tl.int64)
        value = tl.where(s < stop, draft, tl.where(s == stop, token, -1))
        tl.store(tok_row + s, tl.where(error, -1, value))
    tl.store(nacc_ptr + b, tl.where(error, 0, stop))
    tl.store(ncom_ptr + b, tl.where(error, 0, stop + 1))
    tl.store(err_ptr + b, error)


@triton.jit
def _accept_kernel(
    p_ptr,
    sp0,
    sp1,
    q_ptr,
    sq0,
    sq1,
    d_ptr,
    sd0,
    lens_ptr,
    u_ptr,
    su0,
    tok_ptr,  # outputs: ROW and DRAW
    st0,
    nacc_ptr,
    ncom_ptr,
    err_ptr,
    sums_ptr,  # chunk statistics: written by CHUNKS, read by DRAW
    bads_ptr,
    lasts_ptr,
    S,
    V,
    CH,
    K: tl.constexpr,
    BLOCK: tl.constexpr,
    NTP: tl.constexpr,  # ROW only
    SP: tl.constexpr,  # DRAW only
    PASS: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    p_row, q_row = p_ptr + b * sp0, q_ptr + b * sq0
    u_row, d_row = u_ptr + b * su0, d_ptr + b * sd0
    stop, rejected = _stop_point(p_row, q_row, d_row, u_row, lens_ptr, b, sp1, sq1, V, K)
    if PASS == CHUNKS:
        draw_u = 0.0  # pass 1 draws nothing
    else:
        draw_u = tl.load(u_row + tl.where(rejected, K + stop, 2 * K))
    # The stop point's law: p[s], minus q[s] (its row is read only on a rejection).
    law_p = p_row + stop * sp1
    law_q = q_row + tl.maximum(tl.minimum(stop, K - 1), 0) * sq1
    token, n_bad, total = _row_pass(
        law_p,
        law_q,
        V,
        rejected,
        draw_u,
        b,
        sums_ptr,
        bads_ptr,
        lasts_ptr,
        S,
        CH,
        K > 0,
        BLOCK,
        NTP,
        SP,
        PASS,
    )
    if PASS != CHUNKS:
        error = (n_bad > 0) | (total <= 0.0)  # total is finite when n_bad == 0
        _write_round(
            tok_ptr + b * st0, d_row, nacc_ptr, ncom_ptr, err_ptr, b, stop, token, error, K
        )


def speculative_accept(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    draft_lens: torch.Tensor,
    uniforms: torch.Tensor,
):
    """`sampling.speculative_accept` (mutant None) in one launch; arguments checked by
    the caller.

    p,           # [B, K+1, V] float32/bfloat16/float16
    q,           # [B, K, V] float32/bfloat16/float16
    drafts,      # [B, K] integer
    draft_lens,  # [B] integer (clamped to [0, K])
    uniforms,    # [B, 2K+1] float64 (other float dtypes widened, as the torch path)
    returns      (tokens [B, K+1] int64, num_accepted [B] int64, num_committed [B] int64,
                  error [B] bool), the fields of AcceptResult
    """
    B, K = drafts.shape
    V = p.shape[2]
    p = p if p.stride(-1) == 1 else p.contiguous()
    q = q if q.stride(-1) == 1 else q.contiguous()
    drafts = drafts.to(torch.int64).contiguous()
    lens = draft_lens.to(torch.int64).contiguous()
    u = uniforms.to(torch.float64).contiguous()
    q_arg = q if K > 0 else p  # [B, 0, V] has no storage to point at; never read
    device = p.device
    tokens = torch.empty((B, K + 1), dtype=torch.int64, device=device)
    num_accepted = torch.empty(B, dtype=torch.int64, device=device)
    num_committed = torch.empty(B, dtype=torch.int64, device=device)
    error = torch.empty(B, dtype=torch.bool, device=device)
    if B == 0:
        return tokens, num_accepted, num_committed, error
    # Positional launches (keywords cost the host microseconds per call); None stands
    # for an argument the pass does not read (triton_categorical's ROW, CHUNKS, DRAW).
    inputs = (
        p,
        p.stride(0),
        p.stride(1),
        q_arg,
        q_arg.stride(0),
        q_arg.stride(1),
        drafts,
        drafts.stride(0),
        lens,
        u,
        u.stride(0),
    )
    outputs = (tokens, tokens.stride(0), num_accepted, num_committed, error)
    split = split_shape(B, V)
    if split is not None:  # small batches: each row's law in S chunks, then the draw
        block, ch, S, sp, warps = split
        stats = (*chunk_buffers(B, S, device), S, V, ch)
        shape = dict(K=K, BLOCK=block, NTP=None, SP=sp, num_warps=warps)
        no_outputs = (None,) * len(outputs)
        _accept_kernel[(B, S)](*inputs, *no_outputs, *stats, **shape, PASS=CHUNKS.value)
        _accept_kernel[(B,)](*inputs, *outputs, *stats, **shape, PASS=DRAW.value)
    else:
        block, ntp, warps = launch_shape(B, V)
        no_stats = (None, None, None, None, V, None)  # sums, bads, lasts, S, V, CH
        shape = dict(K=K, BLOCK=block, NTP=ntp, SP=None, num_warps=warps)
        _accept_kernel[(B,)](*inputs, *outputs, *no_stats, **shape, PASS=ROW.value)
    return tokens, num_accepted, num_committed, error
