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
    n = len(requests)
    lengths = [len(r.prompt) for r in requests]
    T = max(lengths)
    padded = [r.prompt + [0] * (T - len(r.prompt)) for r in requests]
    tokens = state.upload(padded, torch.int64)  # [n, T]
    slots = state.upload([r.slot for r in requests], torch.int64)  # [n]
    last = state.upload([x - 1 for x in lengths], torch.int64)  # [n]
    budget = state.upload([r.params.max_tokens - 1 for r in requests], torch.int64)
    positions = torch.arange(T, device=tokens.device)[None, :].expand(n, T)
    # Padding sits at positions >= the prompt length: those keys are rewritten by the
    # real tokens before any query at or past them exists.
    ctx = model.context(positions, slots, cache.max_len, prefix=False)
    h = model.run_loops(model.embed(tokens), 0, model.num_loops, cache, ctx)  # [n, T, D]
    h_last = h[torch.arange(n, device=h.device), last]  # [n, D]
    logits = model.logits(h_last)  # [n, V] f32
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
