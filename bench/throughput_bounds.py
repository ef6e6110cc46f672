"""What speculation can buy at best: the compute and bandwidth bounds of its speed-up.

A block-speculation round of a looped model (engine_under_test/runners/spec_round.py)
drafts w tokens, each through the first d of the R loops and the exit head, then runs
the shallow loops of the last draft and loops d..R-1 over the w + 1 positions, and one
target head over them. A nospec step runs R loops and the head for one token. With
τ committed tokens per request-round (measured), the ratio of speculative to nospec
tokens/s can at best be:

- **compute bound** (large batches: every FLOP paid per row):
  τ · (R·F_loop + F_head) / ((w + 1)·R·F_loop + (2w + 1)·F_head),
  F_loop = 2·P_loop + attention (4 · layers · context · heads · head_dim), F_head = 2·D·V
  per token: the draft's loops reuse into verification, so a round costs (w + 1)·R
  loop-tokens, but w draft heads plus w + 1 target heads;
- **bandwidth bound** (small batches: each weight read once per pass, whatever the rows):
  τ · (R·W_loop + W_head) / (((w + 1)·d + R − d)·W_loop + (w + 1)·W_head),
  W the weights' bytes: w + 1 shallow passes of d loops, one deep pass of R − d loops,
  w + 1 head reads (KV cache and activations left out: they grow with the batch and
  the context, and favour neither side much at the benchmark's lengths);
- **pass bound** (launch- or latency-bound batches, the H200's regime up to c = 64 on
  ``small``: every loop pass costs the same wall time in both modes, heads, sampling and
  accept free): τ · R / ((w + 1)·d + R − d). Heads and the round's sampling only lower
  it (session 7 in docs/gpu-runs.md: the kernel-count bound at (K, d) = (3, 2) is 0.98
  of it), so no implementation of this algorithm beats it at those batches.

The absolute bound: at the device's matmul rate P (measured in the same run,
:func:`matmul_flops_per_s`), no mode commits more than P / (FLOPs per committed token)
tokens/s -- F_nospec for nospec, F_round / τ for speculation; the measured tokens/s
over it is the mode's model-FLOP utilisation (MFU).

The three are upper bounds of the ratio for a perfect implementation of either mode in
their regime (the bandwidth bound is never above the pass bound: a round reads the
head w + 1 times). A measured ratio above the bandwidth bound means the batch was
launch-bound rather than weight-read-bound; one above the pass bound means nospec lost
time on the host (c = 1: a blocking step per token), which speculation amortises. The
measured τ and w come from the run's own counters (:func:`round_shape`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine_under_test import ModelConfig


@dataclass(frozen=True)
class RoundShape:
    """Per request-round averages of one speculative run."""

    tokens: float  # τ: committed tokens per request-round (accepted + 1)
    drafts: float  # w: drafted tokens per request-round (<= K)


def round_shape(tokens: int, requests: int, drafted: int, accepted: int) -> RoundShape | None:
    """τ and w from a run's totals: every token after a request's first (its prefill
    token) is committed by a round, and a request-round commits its accepted drafts
    plus one, so request-rounds = (tokens - requests) - accepted. None without rounds."""
    in_rounds = tokens - requests
    rounds = in_rounds - accepted
    if rounds <= 0:
        return None
    return RoundShape(tokens=in_rounds / rounds, drafts=drafted / rounds)


@dataclass(frozen=True)
class ModelCosts:
    """Per-token FLOPs and weight bytes of one loop (all layers once) and of the head."""

    loops: int  # R
    loop_flops: float
    head_flops: float
    loop_bytes: float
    head_bytes: float


def model_costs(cfg: ModelConfig, context: float, bytes_per_weight: int) -> ModelCosts:
    """Costs of a looped preset at an average context length (tokens attended)."""
    if cfg.architecture != "looped":
        raise ValueError(f"bounds are stated for looped models, not {cfg.architecture!r}")
    d, hd = cfg.hidden_size, cfg.head_dim
    attn = d * cfg.num_attention_heads * hd * 2 + d * cfg.num_key_value_heads * hd * 2  # q,o,k,v
    per_layer = attn + 3 * d * cfg.intermediate_size  # + SwiGLU gate, up, down
    layers = cfg.num_hidden_layers
    attention_flops = 4.0 * layers * context * cfg.num_attention_heads * hd  # QK^T and PV
    head = d * cfg.vocab_size
    return ModelCosts(
        loops=cfg.num_loops,
        loop_flops=2.0 * per_layer * layers + attention_flops,
        head_flops=2.0 * head,
        loop_bytes=float(per_layer * layers * bytes_per_weight),
        head_bytes=float(head * bytes_per_weight),
    )


@dataclass(frozen=True)
class Bounds:
    compute: float  # best speculative / nospec tokens/s ratio when FLOP-bound
    bandwidth: float  # ... when weight-read-bound
    passes: float  # ... when every loop pass costs the same (launch-bound), heads free


def loop_passes(shape: RoundShape, loops: int, draft_loops: int) -> float:
    """Loop passes a round runs in sequence: w + 1 shallow passes of d loops, then R − d."""
    return (shape.drafts + 1) * draft_loops + loops - draft_loops


@dataclass(frozen=True)
class RatioParts:
    """A measured speculative / nospec tokens/s ratio, taken apart (one run pair):

        ratio = (slot_tokens / nospec_slot_tokens) / (round_ms / step_ms)

    slot_tokens: committed tokens per slot and round (occupied or not), so
    ``occupancy = slot_tokens / τ`` is the share of τ the scheduling keeps (a finished
    request's slot idles until its refill, the last wave drains, the last round of a
    request is cut at max_tokens); round_ms / step_ms: a round's wall time over a nospec
    step's, prefills included, against ``passes_ratio`` = ((w + 1)·d + R − d) / R."""

    slot_tokens: float
    nospec_slot_tokens: float
    occupancy: float
    round_ms: float
    step_ms: float
    passes_ratio: float

    @property
    def ratio(self) -> float:
        return (self.slot_tokens / self.nospec_slot_tokens) / (self.round_ms / self.step_ms)


def ratio_parts(
    spec_run: dict, nospec_run: dict, slots: int, shape: RoundShape, loops: int, draft_loops: int
) -> RatioParts:
    """Take one speculative run and one nospec run of the same requests apart (runs as
    engine_throughput's ``run_once`` returns them: tokens, rounds, requests, ms_per_round)."""

    def per_slot(run: dict) -> float:
        return run["tokens"] / run["rounds"] / min(slots, run["requests"])

    return RatioParts(
        slot_tokens=per_slot(spec_run),
        nospec_slot_tokens=per_slot(nospec_run),
        occupancy=per_slot(spec_run) / shape.tokens,
        round_ms=spec_run["ms_per_round"],
        step_ms=nospec_run["ms_per_round"],
        passes_ratio=loop_passes(shape, loops, draft_loops) / loops,
    )


def nospec_flops(costs: ModelCosts) -> float:
    """FLOPs per token of a nospec step."""
    return costs.loops * costs.loop_flops + costs.head_flops


def round_flops(costs: ModelCosts, shape: RoundShape) -> float:
    """FLOPs per request-round of block speculation (divide by τ: per committed token)."""
    w = shape.drafts
    return (w + 1) * costs.loops * costs.loop_flops + (2 * w + 1) * costs.head_flops


def matmul_flops_per_s(device: torch.device, dtype: torch.dtype, n: int = 8192) -> float:
    """The device's dense matmul rate, measured: the median of 10 n x n x n products."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for _ in range(13):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times = sorted(times[3:])  # the first products warm the kernel up
    return 2.0 * n**3 / times[len(times) // 2]


def speedup_bounds(costs: ModelCosts, shape: RoundShape, draft_loops: int) -> Bounds:
    R, d, w, tau = costs.loops, draft_loops, shape.drafts, shape.tokens
    nospec_bytes = R * costs.loop_bytes + costs.head_bytes
    passes = loop_passes(shape, R, d)
    round_bytes = passes * costs.loop_bytes + (w + 1) * costs.head_bytes
    return Bounds(
        compute=tau * nospec_flops(costs) / round_flops(costs, shape),
        bandwidth=tau * nospec_bytes / round_bytes,
        passes=tau * R / passes,
    )
