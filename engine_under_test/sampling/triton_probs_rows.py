"""Row streaming and candidate-buffer helpers of the fused probabilities kernel
(`triton_kernels._probs_kernel`; CUDA only, imported with it).

A row of logits is read in BLOCK-wide steps, optionally one step ahead (`_stream`);
`_load_x` gives the scaled logits x = logits / T of one block (IEEE division, as
torch). The top-k candidates (the logits >= a lower bound, with their indices) go into
a per-row buffer of CAP entries (`_append`, `_gather`, `_compact`); `_masked_sum` and
`_write_dense` are the streamed sum and write over the kept set when the candidates do
not fit. Order-preserving integer keys of float32 values (`_key`, `_from_key`) let the
threshold searches (`triton_probs_search`) bisect on integers.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_x(row_ptr, cols, V, t, EVICT: tl.constexpr):
    """Scaled logits of one block of a row (0 past the end; `in_row` says where)."""
    in_row = cols < V
    raw = tl.load(row_ptr + cols, mask=in_row, other=0.0, eviction_policy=EVICT)
    return tl.div_rn(raw.to(tl.float32), t), in_row  # IEEE division, as torch's


@triton.jit
def _stream_start(row_ptr, cols, V, PREFETCH: tl.constexpr, EVICT: tl.constexpr):
    """The first block of a streamed row when prefetching (else a placeholder)."""
    if PREFETCH:
        nxt = tl.load(row_ptr + cols, mask=cols < V, other=0.0, eviction_policy=EVICT)
    else:
        nxt = tl.zeros(cols.shape, row_ptr.dtype.element_ty)
    return nxt


@triton.jit
def _stream_raw(
    row_ptr, cols, V, nxt, BLOCK: tl.constexpr, PREFETCH: tl.constexpr, EVICT: tl.constexpr
):
    """Unscaled float32 logits of the block at `cols`. With PREFETCH the block was loaded
    one step earlier (`nxt`) and the next block's load is issued now, so a load is in
    flight while this block is worked on; returns (raw, in_row, nxt)."""
    if PREFETCH:
        raw = nxt
        nxt = tl.load(
            row_ptr + cols + BLOCK, mask=cols + BLOCK < V, other=0.0, eviction_policy=EVICT
        )
    else:
        raw = tl.load(row_ptr + cols, mask=cols < V, other=0.0, eviction_policy=EVICT)
    return raw.to(tl.float32), cols < V, nxt


@triton.jit
def _stream(
    row_ptr, cols, V, t, nxt, BLOCK: tl.constexpr, PREFETCH: tl.constexpr, EVICT: tl.constexpr
):
    """Scaled logits of the block at `cols` (see `_stream_raw`); returns (x, in_row, nxt)."""
    raw, in_row, nxt = _stream_raw(row_ptr, cols, V, nxt, BLOCK, PREFETCH, EVICT)
    return tl.div_rn(raw, t), in_row, nxt


@triton.jit
def _key(x):
    """Order-preserving int32 key of float32 values; -0.0 and +0.0 share the key 0."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, -(b & 0x7FFFFFFF))


@triton.jit
def _from_key(k):
    k = k.to(tl.int32)
    b = tl.where(k >= 0, k, (-k) | (-2147483648))
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _pick(values, positions, at, default):
    """values[at] of a 1-D block (default when `at` is not a position)."""
    return tl.max(tl.where(positions == at, values, default), 0)


@triton.jit
def _masked_sum(
    row_ptr,
    V,
    t,
    m,
    kth,
    s_k,
    lp,
    li,
    USE_P: tl.constexpr,
    BLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Sum of exp(x - m) over the kept set: x >= kth and, with USE_P, the top-p rule
    (prob bits > lp or (== lp and index <= li)) on prob = exp(x - m) / s_k."""
    total = tl.zeros([], tl.float32)
    nxt = _stream_start(row_ptr, tl.arange(0, BLOCK), V, PREFETCH, "")
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x, in_row, nxt = _stream(row_ptr, cols, V, t, nxt, BLOCK, PREFETCH, "")
        e = tl.exp(x - m)
        keep = in_row & (x >= kth)
        if USE_P:
            pb = tl.div_rn(e, s_k).to(tl.int32, bitcast=True)
            keep = keep & ((pb > lp) | ((pb == lp) & (cols <= li)))
        total += tl.sum(tl.where(keep, e, 0.0), 0)
    return total


@triton.jit
def _append(vbuf, ibuf, n, x, cols, sel, CAP: tl.constexpr):
    """Append the selected (x, index) pairs to the row's buffer after its first n
    entries, in order, keeping at most CAP; returns the new count (may exceed CAP)."""
    pos = n + tl.cumsum(sel.to(tl.int32), 0) - 1
    fit = sel & (pos < CAP)
    tl.store(vbuf + pos, x, mask=fit)
    tl.store(ibuf + pos, cols, mask=fit)
    return n + tl.sum(sel.to(tl.int32), 0)


@triton.jit
def _compact(
    row_ptr, vbuf, ibuf, V, t, lower, CAP: tl.constexpr, BLOCK: tl.constexpr, PREFETCH: tl.constexpr
):
    """Copy the scaled logits >= lower (and their indices) into the row's buffer, in
    index order, up to CAP of them; returns how many there are (may exceed CAP)."""
    n = tl.zeros([], tl.int32)
    nxt = _stream_start(row_ptr, tl.arange(0, BLOCK), V, PREFETCH, "")
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x, in_row, nxt = _stream(row_ptr, cols, V, t, nxt, BLOCK, PREFETCH, "")
        n = _append(vbuf, ibuf, n, x, cols, in_row & (x >= lower), CAP)
    tl.debug_barrier()  # the buffer is read back by other threads of this program
    return n


@triton.jit
def _gather(row_ptr, cbuf, vbuf, ibuf, V, t, lower, colmax, CAP: tl.constexpr, BLOCK: tl.constexpr):
    """`_compact` without streaming the row, when at most CAP columns can hold a logit
    >= lower. Column c holds the elements c, c + BLOCK, c + 2 BLOCK, ... and colmax[c]
    is their (scaled) maximum, so every logit >= lower lies in a column whose maximum is
    >= lower; only those columns are read (a few times k elements instead of V).
    Returns how many logits are >= lower (may exceed CAP), or -1 when the columns do
    not fit in `cbuf` (the caller streams the row instead)."""
    col_sel = colmax >= lower
    n_cols = tl.sum(col_sel.to(tl.int32), 0)
    n = tl.zeros([], tl.int32) - 1
    if n_cols <= CAP:
        n = n + 1
        at = tl.cumsum(col_sel.to(tl.int32), 0) - 1
        tl.store(cbuf + at, tl.arange(0, BLOCK), mask=col_sel)
        tl.debug_barrier()  # the column list is read back by other threads
        j = tl.arange(0, CAP)
        col = tl.load(cbuf + j, mask=j < n_cols, other=0, cache_modifier=".cg")
        for start in range(0, V, BLOCK):
            cols = col + start
            ok = (j < n_cols) & (cols < V)
            raw = tl.load(row_ptr + cols, mask=ok, other=0.0)
            x = tl.div_rn(raw.to(tl.float32), t)
            n = _append(vbuf, ibuf, n, x, cols, ok & (x >= lower), CAP)
        tl.debug_barrier()  # the buffer is read back by other threads of this program
    return n


@triton.jit
def _write_dense(
    orow,
    lrow,
    V,
    ts,
    m,
    kth,
    s_k,
    s_final,
    lp,
    li,
    top_p_on,
    BLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """The write pass that streams the row: exp(x - m) / s_final over the kept set (x >=
    kth and, with top-p, the (lp, li) rule on exp(x - m) / s_k). The output is zero
    already, so only kept tokens are stored."""
    ar = tl.arange(0, BLOCK)
    nxt = _stream_start(lrow, ar, V, PREFETCH, "evict_first")
    if top_p_on:
        for start in range(0, V, BLOCK):
            cols = start + ar
            x, in_row, nxt = _stream(lrow, cols, V, ts, nxt, BLOCK, PREFETCH, "evict_first")
            e = tl.exp(x - m)
            pb = tl.div_rn(e, s_k).to(tl.int32, bitcast=True)
            keep = (x >= kth) & ((pb > lp) | ((pb == lp) & (cols <= li)))
            tl.store(orow + cols, tl.div_rn(e, s_final), mask=in_row & keep)
    else:
        for start in range(0, V, BLOCK):
            cols = start + ar
            x, in_row, nxt = _stream(lrow, cols, V, ts, nxt, BLOCK, PREFETCH, "evict_first")
            keep = x >= kth
            tl.store(orow + cols, tl.div_rn(tl.exp(x - m), s_final), mask=in_row & keep)
