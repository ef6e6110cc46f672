"""Exact threshold searches of the fused probabilities kernel (`triton_kernels`;
CUDA only, imported with it), used when the top-k candidates do not fit the per-row
buffer: `_search_kth` finds the exact k-th largest key, `_search_top_p` the probability
of the last token top-p keeps (float64 masses) and `_nth_tie` cuts ties at it by index,
lowest first, as the reference's stable sort does.
"""

from __future__ import annotations

import triton
import triton.language as tl

from engine_under_test.sampling.triton_probs_rows import _key, _load_x, _pick


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
