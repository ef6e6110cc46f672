"""Triton kernel for `categorical`, and the inverse-CDF row search `triton_accept` shares.

Imported lazily by `_dispatch` (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 in
the tests). One program per row, no sort, in the spirit of FlashInfer's sorting-free
sampling kernels (a block-wide prefix sum over tiles with a running aggregate):

1. pass 1, the one full read of the row: tile by tile, the float64 weights
   w = max(float64(p) [- float64(q)], 0) are summed (tl.sum, float64) into a running
   prefix; the inclusive prefix after each tile is kept in a register vector (NTP
   entries, one per tile), with the last index of positive weight and, for the accept
   kernel, the count of non-finite entries before the clamp;
2. target = max(u * total, 0), float64, as the torch path computes it; the tile holding
   the token is the first whose inclusive prefix is > target (the prefixes are
   non-decreasing: float64 addition of a non-negative number never decreases a sum), a
   search over the NTP-vector without touching memory;
3. that one tile is read again (BLOCK elements, typically from L2) and its cdf is
   base + cumsum(w); the token is the first index with cdf > target and w > 0.

The result equals the torch path's `searchsorted(cdf, target, right=True)` with its
"last positive weight" fallback (target >= total) whenever the float64 sums are exact,
which covers every boundary and tie case built from float32 weights within a 2^29
dynamic range (dyadic laws, one-hots, zero tails): a zero weight adds exactly 0, so
`cdf > target` first holds at a positive weight. When the sums are inexact, two
summation orders (this kernel's tiles, torch's sequential CPU scan or CUDA's parallel
scan) round differently by ~1e-16 relative, and the token can differ only when the
target lies within that distance of a cumulative boundary (about 1e-14 per row on
49,152-token rows); torch's own CPU and CUDA paths differ the same way. The `w > 0`
condition keeps the contract under any rounding: a zero-weight token is never chosen.
If rounding leaves no qualifying index in the chosen tile (cumsum and sum rounded
apart), the tile's last positive index is taken; the tile has one (its sum is > 0).
Rows with no positive finite mass (the caller's error) get some index in [0, V).

A split-row variant (pass 1 on chunks of each row in parallel, then one program per row;
`_chunk_stats`, `_split_search`) serves small batches when SPLIT_CONFIG switches it on;
it is off by default (measured slower, see SPLIT_CONFIG).

Measured on an H200 (torch 2.11, triton 3.6, V = 49,152, float32, bench/sampling_core.py,
floors from a copy bandwidth of ~4.2 TB/s measured in the same run): categorical at
B = 4,096 0.223-0.226 ms against a 0.189 ms floor (1.17-1.20x; torch path 4.14-4.17 ms,
torch.multinomial 1.70-1.72 ms); speculative_accept (K = 3) 0.344-0.371 ms against a
0.333-0.336 ms floor of the rows it must touch (1.03-1.12x; 1.32 ms to read every p and
q row once; torch path 9.08-9.14 ms). At B = 1 and 64: 0.026-0.097 ms, 0.05-0.16x the
torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Launch configuration (benchmarks and tests may change it before a call): BLOCK
# elements per tile (the tile re-read in step 3 is one BLOCK), num_warps per row.
# SAMPLING_CONFIG serves B < LARGE_BATCH rows, LARGE_BATCH_CONFIG the larger batches.
# Measured on an H200 (V = 49,152, K = 3, bench/sampling_core.py): at B = 4,096 the
# accept kernel took 0.353 ms with BLOCK 1024 / 4 warps against 0.418 ms with 4096 / 8
# (floor 0.335 ms); at B = 1 and 64, where one program per row is latency-bound,
# 4096 / 8 was faster (accept 0.079 against 0.094 ms at B = 1, categorical 0.029
# against 0.046 ms at B = 64). The threshold between the two was not measured.
SAMPLING_CONFIG = {"BLOCK": 4096, "num_warps": 8}
LARGE_BATCH_CONFIG = {"BLOCK": 1024, "num_warps": 4}
LARGE_BATCH = 1024
# Split rows for small batches (B < BELOW; 0, the default, switches it off): pass 1 runs
# on S chunks of each row in parallel (about PROGRAMS programs in all, S <= MAX_CHUNKS,
# chunks a multiple of BLOCK), writing each chunk's float64 sum, non-finite count and
# last positive index; a second launch, one program per row, takes the chunks' prefix
# sums in order and re-reads the one chunk that holds the target. Off by default because
# it measured slower on an H200 in back-to-back calls (bench/sampling_core.py
# --split-below 512 against 0; the second launch costs more than the latency it
# hides): accept 0.105 against 0.057 ms at B = 1 and 0.105 against 0.062 ms at B = 64,
# categorical 0.059 against 0.026 ms at B = 64. Its GPU time alone (e.g. under CUDA
# graphs) was not measured. It is tested like the default path (interpreter and GPU).
SPLIT_CONFIG = {"BELOW": 0, "BLOCK": 1024, "num_warps": 4, "PROGRAMS": 528, "MAX_CHUNKS": 64}
_BIG = tl.constexpr(2147483647)  # an index past every row
# The passes of the categorical and accept kernels (their PASS argument): one program per
# row does everything (ROW), or split rows run CHUNKS (pass 1, a program per chunk of each
# row) then DRAW (pass 2, a program per row, from the chunk statistics). Arguments a pass
# does not read are passed as None, which Triton treats as a constant: each pass compiles
# to a kernel with exactly the parameters it reads.
ROW, CHUNKS, DRAW = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _tile_weights(prow, qrow, cols, V, subtract, HAS_Q: tl.constexpr):
    """float64 weights of one tile before the clamp: p, or p - q where `subtract`.

    q is loaded only where `subtract` holds (a masked load reads no memory), and p - 0.0
    is the torch path's p - where(rejected, q, 0.0) bit for bit (-0.0 included).
    """
    in_row = cols < V
    w = tl.load(prow + cols, mask=in_row, other=0.0).to(tl.float64)
    if HAS_Q:
        w = w - tl.load(qrow + cols, mask=in_row & subtract, other=0.0).to(tl.float64)
    return w


@triton.jit
def _inverse_cdf(
    prow, qrow, V, subtract, u, HAS_Q: tl.constexpr, BLOCK: tl.constexpr, NTP: tl.constexpr
):
    """(token int64, non-finite count int32, total float64) of one row's law.

    prow, qrow: pointers to the row's first element (last dimension contiguous);
    subtract: scalar bool, law = (p - q)+ instead of p+; u: scalar float64.
    """
    offs = tl.arange(0, BLOCK)
    tiles = tl.arange(0, NTP)
    n_tiles = tl.cdiv(V, BLOCK)
    prefix = tl.full([NTP], float("inf"), tl.float64)  # inclusive prefix after each tile
    run = tl.zeros([], tl.float64)
    n_bad = tl.zeros([], tl.int32)
    last_pos = tl.full([], -1, tl.int64)
    for t in range(0, n_tiles):
        cols = t * BLOCK + offs
        w = _tile_weights(prow, qrow, cols, V, subtract, HAS_Q)
        n_bad += tl.sum(((w - w) != 0.0).to(tl.int32), 0)  # inf - inf, NaN - NaN: NaN
        w = tl.where(w > 0.0, w, 0.0)  # clamp; NaN (an error row) becomes 0
        last_pos = tl.maximum(last_pos, tl.max(tl.where(w > 0.0, cols, -1), 0).to(tl.int64))
        run = run + tl.sum(w, 0)
        prefix = tl.where(tiles == t, run, prefix)
    target = u * run
    target = tl.where(target > 0.0, target, 0.0)  # torch: clamp_min(0)
    # First tile whose inclusive prefix exceeds the target (prefixes are non-decreasing).
    hit = tl.sum(((prefix <= target) & (tiles < n_tiles)).to(tl.int32), 0)
    base = tl.sum(tl.where(tiles == hit - 1, prefix, 0.0), 0)  # exclusive prefix of `hit`
    cols = hit * BLOCK + offs
    w = _tile_weights(prow, qrow, cols, V, subtract, HAS_Q)
    w = tl.where(w > 0.0, w, 0.0)
    cdf = base + tl.cumsum(w, 0)
    first = tl.min(tl.where((cdf > target) & (w > 0.0), cols, _BIG), 0)
    tile_last = tl.max(tl.where(w > 0.0, cols, -1), 0)
    token = tl.where(first < _BIG, first, tile_last).to(tl.int64)
    token = tl.where(hit < n_tiles, token, last_pos)  # target >= total: last positive
    token = tl.minimum(tl.maximum(token, 0), V - 1)
    return token, n_bad, run


@triton.jit
def _chunk_stats(prow, qrow, V, subtract, c0, CH, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    """(float64 sum, non-finite count, last positive index) of the clamped weights of
    columns [c0, c0 + CH) (CH a multiple of BLOCK; columns past V weigh 0)."""
    offs = tl.arange(0, BLOCK)
    run = tl.zeros([], tl.float64)
    n_bad = tl.zeros([], tl.int32)
    last_pos = tl.full([], -1, tl.int64)
    for start in range(c0, c0 + CH, BLOCK):
        cols = start + offs
        w = _tile_weights(prow, qrow, cols, V, subtract, HAS_Q)
        n_bad += tl.sum(((w - w) != 0.0).to(tl.int32), 0)
        w = tl.where(w > 0.0, w, 0.0)
        last_pos = tl.maximum(last_pos, tl.max(tl.where(w > 0.0, cols, -1), 0).to(tl.int64))
        run = run + tl.sum(w, 0)
    return run, n_bad, last_pos


@triton.jit
def _split_search(
    prow,
    qrow,
    V,
    subtract,
    u,
    sums_row,
    bads_row,
    lasts_row,
    S,
    CH,
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
    SP: tl.constexpr,
):
    """`_inverse_cdf` from the S chunk statistics `_chunk_stats` wrote for this row.

    The prefix over chunks is taken in chunk order (prefix[s] = prefix[s-1] + sum[s]),
    and the hit chunk is re-read with the same running sum `_chunk_stats` computed, so
    base + (its final running sum) is prefix[hit] bit for bit: some tile of the hit
    chunk always reaches the target, and that tile has positive weight.
    """
    sidx = tl.arange(0, SP)
    inside = sidx < S
    sums = tl.load(sums_row + sidx, mask=inside, other=0.0)
    n_bad = tl.sum(tl.load(bads_row + sidx, mask=inside, other=0), 0)
    last_pos = tl.max(tl.load(lasts_row + sidx, mask=inside, other=-1), 0)
    run = tl.zeros([], tl.float64)
    prefix = tl.full([SP], float("inf"), tl.float64)
    for s in range(0, S):
        run = run + tl.sum(tl.where(sidx == s, sums, 0.0), 0)  # one value plus zeros
        prefix = tl.where(sidx == s, run, prefix)
    target = u * run
    target = tl.where(target > 0.0, target, 0.0)
    hit = tl.sum(((prefix <= target) & inside).to(tl.int32), 0)
    base = tl.sum(tl.where(sidx == hit - 1, prefix, 0.0), 0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([], tl.float64)
    token = tl.full([], -1, tl.int64)
    c0 = hit * CH
    for start in range(c0, c0 + CH, BLOCK):
        cols = start + offs
        w = _tile_weights(prow, qrow, cols, V, subtract, HAS_Q)
        w = tl.where(w > 0.0, w, 0.0)
        tile_sum = tl.sum(w, 0)
        here = (token < 0) & (base + (acc + tile_sum) > target)
        cdf = base + (acc + tl.cumsum(w, 0))
        first = tl.min(tl.where((cdf > target) & (w > 0.0), cols, _BIG), 0)
        tile_last = tl.max(tl.where(w > 0.0, cols, -1), 0)
        token = tl.where(here, tl.where(first < _BIG, first, tile_last).to(tl.int64), token)
        acc = acc + tile_sum
    token = tl.where(hit < S, token, last_pos)  # target >= total: last positive
    token = tl.minimum(tl.maximum(token, 0), V - 1)
    return token, n_bad, run


@triton.jit
def _row_pass(
    prow,
    qrow,
    V,
    subtract,
    u,
    b,
    sums_ptr,
    bads_ptr,
    lasts_ptr,
    S,
    CH,
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
    NTP: tl.constexpr,
    SP: tl.constexpr,
    PASS: tl.constexpr,
):
    """This program's share of row b's draw: (token, non-finite count, total) as
    `_inverse_cdf` returns them, by PASS (the categorical and accept kernels' argument).

    ROW: the whole row in this program. CHUNKS (split rows, pass 1): the statistics of
    chunk program_id(1) stored for pass 2; the returned triple is not a draw. DRAW (split
    rows, pass 2): the draw from those statistics.
    """
    if PASS == CHUNKS:
        s = tl.program_id(1)
        total, n_bad, token = _chunk_stats(prow, qrow, V, subtract, s * CH, CH, HAS_Q, BLOCK)
        tl.store(sums_ptr + b * S + s, total)
        tl.store(bads_ptr + b * S + s, n_bad)
        tl.store(lasts_ptr + b * S + s, token)  # the chunk's last positive index
    elif PASS == ROW:
        token, n_bad, total = _inverse_cdf(prow, qrow, V, subtract, u, HAS_Q, BLOCK, NTP)
    else:
        token, n_bad, total = _split_search(
            prow,
            qrow,
            V,
            subtract,
            u,
            sums_ptr + b * S,
            bads_ptr + b * S,
            lasts_ptr + b * S,
            S,
            CH,
            HAS_Q,
            BLOCK,
            SP,
        )
    return token, n_bad, total


@triton.jit
def _categorical_kernel(
    probs_ptr,
    stride_p,
    u_ptr,  # ROW and DRAW
    stride_u,
    out_ptr,
    sums_ptr,  # chunk statistics: written by CHUNKS, read by DRAW
    bads_ptr,
    lasts_ptr,
    S,
    V,
    CH,
    BLOCK: tl.constexpr,
    NTP: tl.constexpr,  # ROW only
    SP: tl.constexpr,  # DRAW only
    PASS: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    row = probs_ptr + b * stride_p
    if PASS == CHUNKS:
        u = 0.0  # pass 1 draws nothing
    else:
        u = tl.load(u_ptr + b * stride_u)
    token, _, _ = _row_pass(
        row, row, V, False, u, b, sums_ptr, bads_ptr, lasts_ptr, S, CH, False, BLOCK, NTP, SP, PASS
    )
    if PASS != CHUNKS:
        tl.store(out_ptr + b, token)


def launch_shape(B: int, V: int) -> tuple[int, int, int]:
    """(BLOCK, NTP, num_warps) for B rows of V tokens (SAMPLING_CONFIG or, from
    LARGE_BATCH rows on, LARGE_BATCH_CONFIG)."""
    config = LARGE_BATCH_CONFIG if B >= LARGE_BATCH else SAMPLING_CONFIG
    block = int(config["BLOCK"])
    ntp = triton.next_power_of_2(max(1, triton.cdiv(V, block)))
    return block, ntp, int(config["num_warps"])


def split_shape(B: int, V: int) -> tuple[int, int, int, int, int] | None:
    """(BLOCK, CH, S, SP, num_warps) of the split-row path for B rows of V tokens, or
    None when one program per row serves them (SPLIT_CONFIG)."""
    cfg = SPLIT_CONFIG
    if B >= int(cfg["BELOW"]):
        return None
    block = int(cfg["BLOCK"])
    chunks = max(
        1, min(int(cfg["MAX_CHUNKS"]), triton.cdiv(int(cfg["PROGRAMS"]), B), triton.cdiv(V, block))
    )
    ch = triton.cdiv(triton.cdiv(V, chunks), block) * block
    S = triton.cdiv(V, ch)
    return block, ch, S, triton.next_power_of_2(S), int(cfg["num_warps"])


def chunk_buffers(B: int, S: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-chunk sums [B, S] float64, non-finite counts int32, last positives int64."""
    return (
        torch.empty((B, S), dtype=torch.float64, device=device),
        torch.empty((B, S), dtype=torch.int32, device=device),
        torch.empty((B, S), dtype=torch.int64, device=device),
    )


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`sampling.categorical` in one launch (arguments checked by the caller).

    probs,  # [B, V] float16/bfloat16/float32/float64 weights
    u,      # [B] float64 (other float dtypes are widened, as the torch path does)
    returns # [B] int64
    """
    probs = probs if probs.stride(-1) == 1 else probs.contiguous()
    u = u.to(torch.float64)
    B, V = probs.shape
    out = torch.empty(B, dtype=torch.int64, device=probs.device)
    if B == 0:
        return out
    # Positional launches (keywords cost the host microseconds per call); None stands
    # for an argument the pass does not read (ROW, CHUNKS, DRAW above).
    row, draws = (probs, probs.stride(0)), (u, u.stride(0), out)
    split = split_shape(B, V)
    if split is not None:
        block, ch, S, sp, warps = split
        stats = (*chunk_buffers(B, S, probs.device), S, V, ch)
        shape = dict(BLOCK=block, NTP=None, SP=sp, num_warps=warps)
        _categorical_kernel[(B, S)](*row, None, None, None, *stats, **shape, PASS=CHUNKS.value)
        _categorical_kernel[(B,)](*row, *draws, *stats, **shape, PASS=DRAW.value)
        return out
    block, ntp, warps = launch_shape(B, V)
    no_stats = (None, None, None, None, V, None)  # sums, bads, lasts, S, V, CH
    shape = dict(BLOCK=block, NTP=ntp, SP=None, num_warps=warps)
    _categorical_kernel[(B,)](*row, *draws, *no_stats, **shape, PASS=ROW.value)
    return out
