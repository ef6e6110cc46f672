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

from typing import NamedTuple

import torch

from ..model import KVCache, LoopedLM
from ..sampling import RngRegistry, batched_probabilities, sample_target
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
    model: LoopedLM,
    cache: KVCache,
    state: SlotState,
    rng: RngRegistry,
    requests: list[Request],
    hooks: MutantHooks,
    hints: dict | None = None,
    fault=None,
) -> PrefillOutputs:
    """Prefill ``requests`` (already bound to slots); outputs stay on the device.

    hints: host promises forwarded to ``batched_probabilities`` (see
        ``RunnerBase.sampling_hints``).
    fault: test hook ``fault(("t1", None), logits) -> logits`` with [n, V] logits;
        None in production."""
    lengths = [len(r.prompt) for r in requests]
    T = max(lengths)
    slots = state.upload([r.slot for r in requests], torch.int64)  # [n]
    last = state.upload([x - 1 for x in lengths], torch.int64)  # [n]
    budget = state.upload([r.params.max_tokens - 1 for r in requests], torch.int64)
    logits = _distinct_prompt_logits(model, cache, state, requests, T)  # [n, V] f32
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


def _distinct_prompt_logits(
    model: LoopedLM, cache: KVCache, state: SlotState, requests: list[Request], T: int
) -> torch.Tensor:
    """[n, V] f32 logits at each request's last prompt position, with one forward per
    distinct prompt: a distribution protocol admits thousands of requests with the same
    prompt (5,000 per fp32_t2 batch), whose prefill would otherwise be the same forward
    thousands of times. The first request of each distinct prompt runs in its own slot;
    every other one receives that slot's keys and values (every depth, positions < T)
    and its logits row. A request's prefill thus never depends on the other prompts in
    its batch beyond how many distinct ones there are (the GEMM's row count)."""
    first: dict[tuple[int, ...], int] = {}
    reps: list[int] = []  # the request that computes each distinct prompt
    inverse: list[int] = []  # per request: the index of its prompt in reps
    for i, r in enumerate(requests):
        j = first.setdefault(tuple(r.prompt), len(reps))
        if j == len(reps):
            reps.append(i)
        inverse.append(j)
    u = len(reps)
    padded = [requests[i].prompt + [0] * (T - len(requests[i].prompt)) for i in reps]
    tokens = state.upload(padded, torch.int64)  # [u, T]
    rep_slots = state.upload([requests[i].slot for i in reps], torch.int64)  # [u]
    rep_last = state.upload([len(requests[i].prompt) - 1 for i in reps], torch.int64)  # [u]
    positions = torch.arange(T, device=tokens.device)[None, :].expand(u, T)
    # Padding sits at positions >= the prompt length: those keys are rewritten by the
    # real tokens before any query at or past them exists.
    ctx = model.context(positions, rep_slots, cache.max_len, prefix=False)
    h = model.run_loops(model.embed(tokens), 0, model.num_loops, cache, ctx)  # [u, T, D]
    logits = model.logits(h[torch.arange(u, device=h.device), rep_last])  # [u, V] f32
    if u == len(requests):
        return logits
    copies = [i for i, j in enumerate(inverse) if reps[j] != i]
    dst = state.upload([requests[i].slot for i in copies], torch.int64)  # [m]
    src = state.upload([requests[reps[inverse[i]]].slot for i in copies], torch.int64)  # [m]
    for kv in (cache.k, cache.v):  # [R, L, S, G, Lmax, hd]
        kv[:, :, dst, :, :T] = kv[:, :, src, :, :T]
    return logits[state.upload(inverse, torch.int64)]  # [n, V]
