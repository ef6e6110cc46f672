"""Prefill: run newly admitted prompts through all R loops and sample t1 from p.

Every depth's KV namespace receives the prompt (positions 0..n-1). The first generated
token t1 is not speculative: it is drawn from p at the last prompt position by
``sample_target`` (the sampling core's one target draw, with its error rule) with the
first uniform of the request's round-0 block (``RngRegistry.draw``; the block has the
same 2K+1 layout as every round, only u[0] is used), so decode rounds start at round 1.
Greedy requests draw nothing (argmax).

Contract 3 holds here as at every stop point: the prefill batch is round 0 of its
requests, and an invalid law (non-finite, zero mass) at any of its rows fails the whole
batch. Failed rows commit nothing, their slots do not advance (the device marks them
dead and rewinds their generators) and the host finishes them with "error".

The device state of each new slot is set here, on the device: next input t1 at
position n, budget max_tokens - 1, and live unless t1 is a stop token, the budget is
already spent or the batch failed -- the same rules the host applies when it reads t1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ..model import KVCache, LoopedLM
from ..sampling import RngRegistry, batched_probabilities, sample_target
from .cuda_graphs import GraphedRound
from .mutant_hooks import MutantHooks
from .state import Request, SlotState


class PrefillOutputs(NamedTuple):
    """Device outputs of one prefill batch (n admitted requests)."""

    t1: torch.Tensor  # [n] int64 the first token (-1 where the law was invalid)
    invalid: torch.Tensor  # [n] int8 why the law was invalid (sampling.INVALID_NAMES)
    failed: torch.Tensor  # [1] bool: an invalid law on any row fails the batch

    def host_view(self) -> dict[str, torch.Tensor]:
        return {"t1": self.t1, "t1_invalid": self.invalid, "t1_failed": self.failed}


@torch.no_grad()
def prefill(
    cache: KVCache,
    state: SlotState,
    rng: RngRegistry,
    requests: list[Request],
    hooks: MutantHooks,
    forward: PrefillForward,
    hints: dict | None = None,
    fault=None,
) -> PrefillOutputs:
    """Prefill ``requests`` (already bound to slots); outputs stay on the device.

    forward: the runner's ``PrefillForward`` (graph-replayed on CUDA).
    hints: host promises forwarded to ``batched_probabilities`` (see
        ``RunnerBase.sampling_hints``).
    fault: test hook ``fault(("t1", None), logits) -> logits`` with [n, V] logits;
        None in production."""
    lengths = [len(r.prompt) for r in requests]
    slots = state.upload([r.slot for r in requests], torch.int64)  # [n]
    last = state.upload([x - 1 for x in lengths], torch.int64)  # [n]
    budget = state.upload([r.params.max_tokens - 1 for r in requests], torch.int64)
    logits = _distinct_prompt_logits(forward, cache, state, requests)  # [n, V] f32
    if fault is not None:
        logits = fault(("t1", None), logits)
    p = batched_probabilities(
        logits, state.temperature[slots], state.top_k[slots], state.top_p[slots], **(hints or {})
    )
    random = state.random[slots]
    u = hooks.share(rng.draw(slots, random), random)  # [n, 2K+1]
    res = sample_target(p, u[:, 0])
    t1 = res.tokens[:, 0]
    failed = res.error.any().view(1)

    # Failed rows die without advancing; their input stays a valid id (-1 is not one)
    # because dead rows still run through the model in later rounds.
    is_stop = (t1[:, None] == state.stop_ids[slots]).any(dim=-1)
    state.next_token.index_copy_(0, slots, t1.clamp_min(0))
    state.next_pos.index_copy_(0, slots, last + 1)
    state.budget.index_copy_(0, slots, budget)
    state.live.index_copy_(0, slots, ~is_stop & (budget > 0) & ~failed)
    rng.rewind(slots, random & failed)
    return PrefillOutputs(t1, res.invalid, failed)


class PrefillForward:
    """The model forward of a prefill batch's distinct prompts, graph-replayed on CUDA.

    ``forward(cache, prompts, slots, upload)`` runs the u prompts (each in its own slot,
    all R loops, keys and values written at every depth) and returns [u, V] float32
    logits at each prompt's last position. An eager prefill is ~2,300 small kernels
    launched from Python (35 to 55 ms on the host on an H200 at the small preset,
    bench/host_timeline.py), which the device cannot run ahead of: under continuous
    batching every refill of a few slots cost that much wall time. On CUDA the batch's
    prompt axis is padded to a multiple of ``PAD_T`` (so that refills share a few
    shapes) and each (u, padded length) is a ``GraphedRound`` key, captured at its third
    use like a round; the inputs are copied into the key's static buffers first. CPU
    runs unpadded and eagerly, exactly as before. Padding sits at positions >= the
    prompt length: those keys are rewritten by the real tokens before any query at or
    past them exists, and the causal mask hides them from the prompt's own queries.
    Eager and replayed forwards of one shape run the same kernels on the same inputs."""

    PAD_T = 16

    def __init__(self, model: LoopedLM, device: torch.device, graphs: bool):
        self.model = model
        self.pad = torch.device(device).type == "cuda"
        self.graphs = (
            GraphedRound(self._forward, lambda: [], torch.device(device))
            if graphs and self.pad
            else None
        )
        self.cache: KVCache | None = None  # the cache the captured graphs write into
        # (u, T) -> static (tokens [u, T], rows [u], last [u]) read by that key's graph
        self.inputs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def release(self) -> None:
        """Drop the captured graphs and the reference to the KV cache (so that
        ``RunnerBase.release`` frees its memory now)."""
        if self.graphs is not None:
            self.graphs.invalidate()
        self.cache = None

    def _forward(self, u: int, T: int) -> tuple[torch.Tensor]:
        """The graphed function of key (u, T): reads that key's static inputs."""
        return (self._run(*self.inputs[(u, T)]),)

    def _run(
        self,
        tokens: torch.Tensor,  # [u, T] int64 prompts, padded
        rows: torch.Tensor,  # [u] int64 their slots
        last: torch.Tensor,  # [u] int64 index of each prompt's last token
    ) -> torch.Tensor:  # [u, V] f32
        model, cache = self.model, self.cache
        u, T = tokens.shape
        positions = torch.arange(T, device=tokens.device)[None, :].expand(u, T)
        ctx = model.context(positions, rows, cache.max_len, prefix=False)
        h = model.run_loops(model.embed(tokens), 0, model.num_loops, cache, ctx)  # [u, T, D]
        return model.logits(h[torch.arange(u, device=h.device), last])

    def __call__(
        self,
        cache: KVCache,
        prompts: list[list[int]],
        slots: list[int],
        upload: Callable[[list, torch.dtype], torch.Tensor],
    ) -> torch.Tensor:
        """[u, V] f32 logits; ``upload`` is ``SlotState.upload`` (pinned, no sync)."""
        u, T = len(prompts), max(len(p) for p in prompts)
        if self.pad:
            T = min(-(-T // self.PAD_T) * self.PAD_T, cache.max_len)
        if cache is not self.cache:  # a new or grown cache: graphs write the old one
            if self.graphs is not None:
                self.graphs.invalidate()
            self.cache = cache
        padded = [p + [0] * (T - len(p)) for p in prompts]
        new = (
            upload(padded, torch.int64),
            upload(slots, torch.int64),
            upload([len(p) - 1 for p in prompts], torch.int64),
        )
        if self.graphs is None:
            return self._run(*new)
        static = self.inputs.setdefault((u, T), tuple(torch.empty_like(t) for t in new))
        for buf, t in zip(static, new, strict=True):
            buf.copy_(t)
        return self.graphs(u, T)[0].clone()  # the next replay overwrites the static output


def _distinct_prompt_logits(
    forward: PrefillForward,
    cache: KVCache,
    state: SlotState,
    requests: list[Request],
) -> torch.Tensor:
    """[n, V] f32 logits at each request's last prompt position, with one forward per
    distinct prompt: a distribution protocol admits thousands of requests with the same
    prompt (5,000 per fp32_t2 batch), whose prefill would otherwise be the same forward
    thousands of times. The first request of each distinct prompt runs in its own slot;
    every other one receives that slot's keys and values (every depth, positions < T)
    and its logits row. A request's prefill thus never depends on the other prompts in
    its batch beyond how many distinct ones there are and the longest (the GEMM's row
    count)."""
    first: dict[tuple[int, ...], int] = {}
    reps: list[int] = []  # the request that computes each distinct prompt
    inverse: list[int] = []  # per request: the index of its prompt in reps
    for i, r in enumerate(requests):
        j = first.setdefault(tuple(r.prompt), len(reps))
        if j == len(reps):
            reps.append(i)
        inverse.append(j)
    logits = forward(
        cache,
        [requests[i].prompt for i in reps],
        [requests[i].slot for i in reps],
        state.upload,
    )  # [u, V]
    if len(reps) == len(requests):
        return logits
    T = max(len(r.prompt) for r in requests)
    copies = [i for i, j in enumerate(inverse) if reps[j] != i]
    dst = state.upload([requests[i].slot for i in copies], torch.int64)  # [m]
    src = state.upload([requests[reps[inverse[i]]].slot for i in copies], torch.int64)  # [m]
    for kv in (cache.k, cache.v):  # [R, L, S, G, Lmax, hd]
        kv[:, :, dst, :, :T] = kv[:, :, src, :, :T]
    return logits[state.upload(inverse, torch.int64)]  # [n, V]
