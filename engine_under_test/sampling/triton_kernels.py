"""Fused Triton kernels for the CUDA path (imported lazily by `_dispatch`, CUDA only).

Two kernels, each tested against the torch path (tests/engine/test_sampling_gpu.py):

* `probabilities`: all of `batched_probabilities` in one fused launch, one program per
  row, no sort of the vocabulary. The output is zeroed by a memset before the launch
  and the kernel stores only nonzero probabilities:

  1. pass 1 (the only full read of the row from HBM): the maxima of the BLOCK columns
     (column c holds the elements c, c + BLOCK, ...), taken on the raw logits and then
     scaled, x = logits / T (IEEE division, as torch); x / T is monotone in x, so this
     equals the maxima of the scaled logits bit for bit. Greedy rows instead find the
     first argmax (NaN first, as torch.argmax) and store one 1.0;
  2. top-k (0 < k < V): the k-th largest of GROUPS group maxima, L, is a lower bound of
     the k-th largest logit (k groups hold a logit >= L), so every kept logit is >= L
     and lies in a column whose maximum is >= L. When at most CAP columns qualify, only
     those columns are read (a gather of a few times k elements); otherwise (heavy ties,
     k > GROUPS) the row is streamed. The logits >= L go with their indices into a
     per-row buffer of CAP entries; when they fit, a sort of the buffer gives the exact
     k-th value and the kept set (ties at the k-th value included). When they do not
     fit, a multi-threshold search over order-preserving integer keys finds the exact
     k-th value in a few passes, NT thresholds per pass;
  3. top-p (P < 1): the law top-p sorts is probs_k = exp(x - m) / S_k over the kept
     set, in float32. When the kept set is in the buffer, a sort by (prob desc,
     index asc) and a float64 cumulative sum give the last kept (prob, index) pair
     exactly as the reference's stable sort does. Otherwise a multi-threshold search
     over the probability bits with float64 masses finds the probability tau of the
     last kept token (the largest value whose tail mass reaches P), and ties at tau
     are cut by index, lowest first, as the stable sort does;
  4. the write: exp(x - m) / S over the final kept set. When the kept set is in the
     buffer, the buffer's entries are stored at their indices (no further read of the
     row); otherwise the row is streamed once more.

  Performance (H200, B = 1024, V = 49,152, bf16; docs/gpu-runs.md), against a copy that
  reads the logits and writes float32 once: with top-k 20, 1.1-1.4x per call in
  bench/probs_kernel_sweep.py (up to 1.9x in bench/sampling_core.py) and 1.0x in device
  time (kernel 0.110 ms + memset 0.045 ms); the pre-gather version of this kernel ran
  at 4.1x, the sort-based torch path at 59x. Without top-k (every row streamed three
  times) 2.0-2.3x; greedy 0.9-1.1x. At small B the kernel is latency-bound: one
  program per row, and the register count of the whole kernel (the sorts and searches
  included) limits how many rows are in flight per SM.

  The result is the reference law up to float32 rounding: the supports agree and the
  probabilities are within the 1e-6 the CUDA path is held to (exp and the sums are
  computed in another order than torch's kernels; 1.2e-7 from the CPU law on the
  benchmark's rows). On full 49,152-token rows the CPU law is itself up to ~1.3e-6
  off the exact (float64) law, its float32 sums being the least accurate of the three.
  Everything the kernel decides (the k-th value, the top-p cut) is decided on values
  it computes itself, with the same expression in every pass, so the kept set is
  consistent with the probabilities it writes.
* `philox_uniforms`: re-exported from `triton_philox` (the Philox4x32-10 kernel).

The probabilities kernel's helpers live in `triton_probs_rows` (row streaming, the
candidate buffer) and `triton_probs_search` (the exact threshold searches);
`bench/triton_sass_digest.py` prints a digest of the kernel's machine code, so a
move of its code can be checked without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine_under_test.sampling.triton_philox import philox_uniforms  # noqa: F401
from engine_under_test.sampling.triton_probs_rows import (
    _compact,
    _from_key,
    _gather,
    _key,
    _masked_sum,
    _pick,
    _stream,
    _stream_raw,
    _stream_start,
    _write_dense,
)
from engine_under_test.sampling.triton_probs_search import _search_kth, _search_top_p

# Launch configuration of `probabilities` (benchmarks may change it before a call).
# BLOCK: elements per streaming step, whatever V (one compiled variant for every
# vocabulary); GROUPS: group maxima for the top-k bound (<= BLOCK; the fast top-k path
# takes k <= GROUPS); CAP: per-row candidate buffer; SEARCH_BLOCK x THRESHOLDS: one step
# of the threshold searches; num_warps: warps per row; maxnreg: register cap (0: none);
# PREFETCH: 1 issues each streamed block's load one step ahead. The defaults are the
# fastest of bench/probs_kernel_sweep.py's configurations on an H200 (docs/gpu-runs.md).
PROBS_CONFIG = {
    "BLOCK": 4096,
    "GROUPS": 256,
    "CAP": 256,
    "SEARCH_BLOCK": 128,
    "THRESHOLDS": 16,
    "num_warps": 8,
    "maxnreg": 128,
    "PREFETCH": 1,
}
_BIG_INDEX = tl.constexpr(2147483647)  # an index past every row


@triton.jit
def _probs_kernel(
    logits_ptr,
    stride_l,
    out_ptr,
    stride_o,
    t_ptr,
    k_ptr,
    p_ptr,
    vbuf_ptr,
    ibuf_ptr,
    cbuf_ptr,
    V,
    BLOCK: tl.constexpr,
    GROUPS: tl.constexpr,
    CAP: tl.constexpr,
    SB: tl.constexpr,
    NT: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    lrow = logits_ptr + row * stride_l
    orow = out_ptr + row * stride_o
    vbuf = vbuf_ptr + row * CAP
    ibuf = ibuf_ptr + row * CAP
    cbuf = cbuf_ptr + row * CAP
    t = tl.load(t_ptr + row)
    k = tl.load(k_ptr + row)
    top_p = tl.load(p_ptr + row)
    greedy = t == 0.0
    ts = tl.where(greedy, 1.0, t)
    NEG: tl.constexpr = float("-inf")
    ar = tl.arange(0, BLOCK)

    if greedy:
        # The first index of the maximum (torch.argmax: a NaN counts as the maximum).
        best = tl.full([], NEG, tl.float32)
        best_i = tl.zeros([], tl.int32) + _BIG_INDEX
        nan_i = tl.zeros([], tl.int32) + _BIG_INDEX
        nxt = _stream_start(lrow, ar, V, PREFETCH, "evict_last")
        for start in range(0, V, BLOCK):
            cols = start + ar
            x, in_row, nxt = _stream(lrow, cols, V, ts, nxt, BLOCK, PREFETCH, "evict_last")
            xm = tl.where(in_row, x, NEG)
            cm = tl.max(xm, 0)
            ci = tl.min(tl.where(in_row & (xm == cm), cols, _BIG_INDEX), 0)
            upd = (cm > best) | (start == 0)
            best_i = tl.where(upd, ci, best_i)
            best = tl.where(upd, cm, best)
            nan_i = tl.minimum(nan_i, tl.min(tl.where(in_row & (x != x), cols, _BIG_INDEX), 0))
        g = tl.where(nan_i < _BIG_INDEX, nan_i, best_i)
        tl.store(orow + g, 1.0)  # the output is zero already
    else:
        # pass 1: the maxima of the BLOCK columns (column c: the elements c, c + BLOCK,
        # ...) and of GROUPS interleaved groups of columns. The maxima are taken on the
        # raw logits and scaled once: x / t is monotone in x for t > 0 (and rounding is
        # monotone), so this is bit for bit the maximum of the scaled logits, at one
        # division per column instead of one per element.
        rawmax = tl.full([BLOCK], NEG, tl.float32)
        nxt = _stream_start(lrow, ar, V, PREFETCH, "evict_last")
        for start in range(0, V, BLOCK):
            cols = start + ar
            raw, in_row, nxt = _stream_raw(lrow, cols, V, nxt, BLOCK, PREFETCH, "evict_last")
            rawmax = tl.maximum(rawmax, tl.where(in_row, raw, NEG))
        colmax = tl.div_rn(rawmax, ts)
        m = tl.max(colmax, 0)
        p64 = top_p.to(tl.float64)
        top_p_on = top_p < 1.0
        top_k_on = (k > 0) & (k < V)

        kth = tl.full([], NEG, tl.float32)
        n_buf = tl.zeros([], tl.int32)  # entries in the buffer
        n_kept = tl.zeros([], tl.int32) + V
        complete = tl.zeros([], tl.int32)  # 1: the buffer holds every kept token
        from_buffer = tl.zeros([], tl.int32)  # 1: kth still to be read from the buffer
        if top_k_on:
            gmax = tl.max(tl.reshape(colmax, [GROUPS, BLOCK // GROUPS]), 1)
            gsorted = tl.sort(gmax, 0, descending=True)
            lower = _pick(gsorted, tl.arange(0, GROUPS), k - 1, NEG)  # -inf if k > GROUPS
            n_buf = _gather(lrow, cbuf, vbuf, ibuf, V, ts, lower, colmax, CAP, BLOCK)
            if n_buf < 0:  # too many candidate columns (ties, large k): stream the row
                n_buf = _compact(lrow, vbuf, ibuf, V, ts, lower, CAP, BLOCK, PREFETCH)
            if n_buf <= CAP:
                complete = complete + 1
                from_buffer = from_buffer + 1
            else:
                lo, cnt = _search_kth(lrow, V, ts, k, _key(lower), n_buf, _key(m) + 1, SB, NT)
                kth = _from_key(lo)
                n_kept = cnt.to(tl.int32)
                if top_p_on:
                    if n_kept <= CAP:
                        n_buf = _compact(lrow, vbuf, ibuf, V, ts, kth, CAP, BLOCK, PREFETCH)
                        complete = complete + 1

        lp = tl.zeros([], tl.int32) - 1  # top-p rule: keep prob bits > lp or
        li = tl.zeros([], tl.int32) - 1  # (== lp and index <= li); (-1, -1) keeps all
        s_k = tl.zeros([], tl.float32)
        s_final = tl.zeros([], tl.float32)
        if complete != 0:
            j = tl.arange(0, CAP)
            in_buf = j < n_buf
            bv = tl.load(vbuf + j, mask=in_buf, other=NEG, cache_modifier=".cg")
            bi = tl.load(ibuf + j, mask=in_buf, other=_BIG_INDEX, cache_modifier=".cg")
            if from_buffer != 0:
                kth = _pick(tl.sort(bv, 0, descending=True), j, k - 1, NEG)
            kept = in_buf & (bv >= kth)
            n_kept = tl.sum(kept.to(tl.int32), 0)
            e = tl.where(kept, tl.exp(bv - m), 0.0)
            s_k = tl.sum(e, 0)
            s_final = s_k
            final = kept
            if top_p_on:
                p = tl.where(kept, tl.div_rn(tl.exp(bv - m), s_k), 0.0)
                pb = p.to(tl.int32, bitcast=True)
                key = (pb.to(tl.int64) << 32) | (2147483647 - bi).to(tl.int64)
                skey = tl.sort(key, 0, descending=True)  # prob desc, then index asc
                sbits = (skey >> 32).to(tl.int32)
                sidx = (2147483647 - (skey & 0xFFFFFFFF)).to(tl.int32)
                cum = tl.cumsum(sbits.to(tl.float32, bitcast=True).to(tl.float64), 0)
                below = tl.sum(((cum < p64) & (j < n_kept)).to(tl.int32), 0)
                cut = below < n_kept
                lp = tl.where(cut, _pick(sbits, j, below, -1), lp)
                li = tl.where(cut, _pick(sidx, j, below, -1), li)
                final = kept & ((pb > lp) | ((pb == lp) & (bi <= li)))
                s_final = tl.sum(tl.where(final, e, 0.0), 0)
            # The write: the output is zero already (the launcher allocates it zeroed),
            # so only the kept probabilities are stored, at their indices; the same
            # values the streamed write computes, without reading the row again.
            tl.store(orow + bi, tl.div_rn(e, s_final), mask=final)
        else:
            s_k = _masked_sum(lrow, V, ts, m, kth, s_k, lp, li, False, BLOCK, PREFETCH)
            s_final = s_k
            if top_p_on:
                pmax_bits = tl.div_rn(tl.exp(m - m), s_k).to(tl.int32, bitcast=True)
                lp, li = _search_top_p(lrow, V, ts, m, kth, s_k, p64, pmax_bits, SB, NT, BLOCK)
                s_final = _masked_sum(lrow, V, ts, m, kth, s_k, lp, li, True, BLOCK, PREFETCH)
            _write_dense(orow, lrow, V, ts, m, kth, s_k, s_final, lp, li, top_p_on, BLOCK, PREFETCH)


def probabilities(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """`batched_probabilities` in one fused launch (see the module docstring).

    logits,       # [B, V] float32/bf16/fp16 CUDA (read only; float64 is rounded first)
    temperature,  # [B] float32 (0: greedy)
    top_k,        # [B] int64 (<= 0 or >= V: off)
    top_p,        # [B] float32 (>= 1: off)
    returns       # [B, V] float32
    """
    if logits.dtype == torch.float64:
        logits = logits.float()  # the kernel loads 16/32-bit floats; float64 -> float32 first
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    B, V = logits.shape
    # Zeroed by one memset (full bandwidth, ordered before the kernel on the stream):
    # the kernel then stores only nonzero probabilities. A version that wrote the zeros
    # itself, with a barrier before the kept values, gave wrong supports on an H200 (2
    # of 160 rows of test_fused_kernel_on_ties_cuts_and_fallbacks); this one passes.
    out = torch.zeros((B, V), dtype=torch.float32, device=logits.device)
    if B == 0:
        return out
    cfg = PROBS_CONFIG
    cap = cfg["CAP"]
    extra = {"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}
    vbuf = torch.empty((B, cap), dtype=torch.float32, device=logits.device)
    ibuf = torch.empty((B, cap), dtype=torch.int32, device=logits.device)
    cbuf = torch.empty((B, cap), dtype=torch.int32, device=logits.device)
    _probs_kernel[(B,)](
        logits,
        logits.stride(0),
        out,
        out.stride(0),
        temperature.to(torch.float32).contiguous(),
        top_k.to(torch.int64).contiguous(),
        top_p.to(torch.float32).contiguous(),
        vbuf,
        ibuf,
        cbuf,
        V,
        BLOCK=cfg["BLOCK"],
        GROUPS=min(cfg["GROUPS"], cfg["BLOCK"]),
        CAP=cap,
        SB=cfg["SEARCH_BLOCK"],
        NT=cfg["THRESHOLDS"],
        PREFETCH=bool(cfg.get("PREFETCH", 0)),
        num_warps=cfg["num_warps"],
        **extra,
    )
    return out
