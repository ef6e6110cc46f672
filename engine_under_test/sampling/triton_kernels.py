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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine_under_test.sampling.triton_philox import philox_uniforms  # noqa: F401

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


@triton.jit
def _search_kth(row_ptr, V, t, k, lo, cnt_lo, hi, SB: tl.constexpr, NT: tl.constexpr):
    """Exact top-k threshold key: the largest key lo with count(key >= lo) >= k, or any
    key with exactly k keys above it (the same kept set). Starts from a bracket with
    count(key >= lo) = cnt_lo >= k and count(key >= hi) < k; each pass counts the keys
    above NT thresholds spread over the bracket and narrows it NT-fold."""
    jv = tl.arange(0, NT).to(tl.int64)
    lo = lo.to(tl.int64)
    hi = hi.to(tl.int64)
    cnt_lo = cnt_lo.to(tl.int64)
    while (hi - lo > 1) & (cnt_lo != k):
        thr = lo + ((hi - lo) * jv) // NT  # thr[0] == lo
        thr32 = thr.to(tl.int32)  # between lo and hi: int32 keys
        # Per-thread partial counts, reduced across threads once per pass.
        acc = tl.zeros([SB, NT], tl.int32)
        for start in range(0, V, SB):
            cols = start + tl.arange(0, SB)
            x, in_row = _load_x(row_ptr, cols, V, t, "")
            key = _key(x)
            acc += (in_row[:, None] & (key[:, None] >= thr32[None, :])).to(tl.int32)
        cnt = tl.sum(acc, 0).to(tl.int64)
        jlo = tl.maximum(tl.max(tl.where(cnt >= k, jv, -1), 0), 0)
        new_lo = _pick(thr, jv, jlo, -(2**62))
        cnt_lo = _pick(cnt, jv, jlo, 0)
        hi = tl.where(jlo + 1 < NT, _pick(thr, jv, jlo + 1, -(2**62)), hi)
        lo = new_lo
    return lo, cnt_lo


@triton.jit
def _search_top_p(
    row_ptr,
    V,
    t,
    m,
    kth,
    s_k,
    p64,
    pmax_bits,
    SB: tl.constexpr,
    NT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The top-p cut over prob = exp(x - m) / s_k on the kept set x >= kth, as the
    pair (lp, li): keep prob bits > lp, or == lp with index <= li.

    tau, the prob of the last kept token, is the largest prob value whose tail mass
    (sum of probs >= it, float64) reaches P; every prob > tau is kept, and of the
    probs == tau the lowest indices, as many as the prefix needs. No value reaching P
    (float rounding) keeps everything."""
    jv = tl.arange(0, NT).to(tl.int64)
    lo = tl.zeros([], tl.int64)
    hi = pmax_bits.to(tl.int64) + 1
    cnt_lo = tl.zeros([], tl.int64) + 2 * V + 2  # unknown yet: forces the first pass
    cnt_hi = tl.zeros([], tl.int64)
    mass_hi = tl.zeros([], tl.float64)
    first = tl.zeros([], tl.int32) + 1
    keep_all = tl.zeros([], tl.int32)
    while (keep_all == 0) & (hi - lo > 1) & (cnt_lo - cnt_hi != 1):
        thr = lo + ((hi - lo) * jv) // NT  # thr[0] == lo
        thr32 = thr.to(tl.int32)  # prob bits: int32
        # Per-thread partial counts and float64 masses, reduced across threads once per
        # pass (a reduction per block would cost more than the block's arithmetic).
        acc_n = tl.zeros([SB, NT], tl.int32)
        acc_m = tl.zeros([SB, NT], tl.float64)
        for start in range(0, V, SB):
            cols = start + tl.arange(0, SB)
            x, in_row = _load_x(row_ptr, cols, V, t, "")
            p = tl.div_rn(tl.exp(x - m), s_k)
            pb = p.to(tl.int32, bitcast=True)
            ge = (in_row & (x >= kth))[:, None] & (pb[:, None] >= thr32[None, :])
            acc_n += ge.to(tl.int32)
            acc_m += tl.where(ge, p.to(tl.float64)[:, None], 0.0)
        cnt = tl.sum(acc_n, 0).to(tl.int64)
        mass = tl.sum(acc_m, 0)
        # the first pass has thr[0] == 0: its mass is the whole kept mass
        keep_all = tl.where((first == 1) & (_pick(mass, jv, 0, 0.0) < p64), 1, 0)
        first = first * 0
        jlo = tl.maximum(tl.max(tl.where(mass >= p64, jv, -1), 0), 0)
        new_lo = _pick(thr, jv, jlo, -1)
        cnt_lo = _pick(cnt, jv, jlo, 0)
        up = jlo + 1 < NT
        hi = tl.where(up, _pick(thr, jv, jlo + 1, -1), hi)
        cnt_hi = tl.where(up, _pick(cnt, jv, jlo + 1, 0), cnt_hi)
        mass_hi = tl.where(up, _pick(mass, jv, jlo + 1, 0.0), mass_hi)
        lo = new_lo
    keep_all = tl.where(first == 1, 1, keep_all)  # no pass ran: no positive max prob
    lp = (lo - 1).to(tl.int32)  # keep every prob >= tau (bits >= lo)
    li = tl.zeros([], tl.int32) - 1
    if keep_all != 0:
        lp = tl.zeros([], tl.int32) - 1
    elif cnt_lo - cnt_hi > 1:
        # hi == lo + 1: tau has the bits lo and n_tie tokens share it. The prefix takes
        # the first c of them (by index), c the least with mass_hi + c * tau >= P.
        tau = _from_bits64(lo)
        n_tie = cnt_lo - cnt_hi
        c = ((p64 - mass_hi) / tau).to(tl.int64)
        c = tl.where(mass_hi + c.to(tl.float64) * tau < p64, c + 1, c)
        c = tl.where((c > 1) & (mass_hi + (c - 1).to(tl.float64) * tau >= p64), c - 1, c)
        c = tl.minimum(tl.maximum(c, 1), n_tie)
        if c < n_tie:
            lp = lo.to(tl.int32)
            li = _nth_tie(row_ptr, V, t, m, kth, s_k, lo.to(tl.int32), c.to(tl.int32), BLOCK)
    return lp, li


@triton.jit
def _from_bits64(bits):
    return bits.to(tl.int32).to(tl.float32, bitcast=True).to(tl.float64)


@triton.jit
def _nth_tie(row_ptr, V, t, m, kth, s_k, tie_bits, c, BLOCK: tl.constexpr):
    """Index of the c-th kept token (by index) whose prob has the bits tie_bits."""
    run = tl.zeros([], tl.int32)
    found = tl.zeros([], tl.int32) - 1
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x, in_row = _load_x(row_ptr, cols, V, t, "")
        pb = tl.div_rn(tl.exp(x - m), s_k).to(tl.int32, bitcast=True)
        tie = in_row & (x >= kth) & (pb == tie_bits)
        rank = run + tl.cumsum(tie.to(tl.int32), 0)
        found = tl.maximum(found, tl.max(tl.where(tie & (rank == c), cols, -1), 0))
        run += tl.sum(tie.to(tl.int32), 0)
    return found


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
