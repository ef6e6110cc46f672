"""Plain decoding: one token per step at full depth R, sampled from p.

Each step is an effective-K=0 round: ``sample_target(p, u)``, the sampling core's one
target draw (the same call as prefill and the same rule as a speculative round's bonus),
with u the first uniform of the request's block for that step (``RngRegistry.draw``,
one block per step, the same request-owned Philox stream as every mode), so fixed-seed
replay holds. Greedy rows take the argmax and draw nothing. The draw's error flag (an
invalid law: non-finite or no mass) on a live row fails the step exactly like a
speculative round (contract 3, applied by ``RunnerBase.apply_round``). On CUDA the step is
captured once per batch bucket and replayed (``RunnerBase.run_round``), like the
speculative rounds, so throughput comparisons between modes are like for like.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model import KVCache, LoopedLM
from ..sampling import RngRegistry, batched_probabilities, sample_target
from .base import RunnerBase
from .mutant_hooks import MutantHooks
from .state import SlotState


class StepOutputs(NamedTuple):
    tokens: torch.Tensor  # [B, 1] int64 the sampled token (-1 on error)
    num_committed: torch.Tensor  # [B] int64 1 (0 on error)
    error: torch.Tensor  # [B] bool invalid law
    invalid: torch.Tensor  # [B] int8 why (sampling.INVALID_NAMES)
    live: torch.Tensor  # [B] bool
    failed: torch.Tensor  # [1] bool
    pos: torch.Tensor  # [B] int64 input position
    input_token: torch.Tensor  # [B] int64

    def host_view(self) -> dict[str, torch.Tensor]:
        zeros = torch.zeros_like(self.num_committed)
        return {
            "tokens": self.tokens,
            "num_committed": self.num_committed,
            "num_accepted": zeros,
            "draft_lens": zeros,
            "error": self.error,
            "invalid": self.invalid,
            "live": self.live,
            "failed": self.failed,
            "pos": self.pos,
            "input_token": self.input_token,
        }


@torch.no_grad()
def nospec_step(
    model: LoopedLM,
    cache: KVCache,
    state: SlotState,
    rng: RngRegistry,
    B: int,
    hooks: MutantHooks,
    fault=None,
    hints: dict | None = None,
) -> StepOutputs:
    """One decode step for slots 0..B-1 (inputs read from ``state``; no host reads)."""
    rows = torch.arange(B, device=state.device)
    tok, pos = state.next_token[:B], state.next_pos[:B]
    live = state.live[:B].clone()
    random = state.random[:B] & live
    u = hooks.share(rng.draw(rows, random), random)[:, 0]
    ctx = model.context(pos[:, None], rows, cache.max_len, prefix=True)
    h = model.run_loops(model.embed(tok[:, None]), 0, model.num_loops, cache, ctx)
    logits = model.logits(h[:, 0])  # [B, V] f32
    logits = hooks.target_logits(logits[:, None], random)[:, 0]
    if fault is not None:
        logits = fault(("p", None), logits)
    p = batched_probabilities(
        logits, state.temperature[:B], state.top_k[:B], state.top_p[:B], **(hints or {})
    )
    res = sample_target(p, u)
    failed = (res.error & live).any().view(1)
    return StepOutputs(
        res.tokens,
        res.num_committed,
        res.error,
        res.invalid,
        live,
        failed,
        pos.clone(),
        tok.clone(),
    )


class NospecRunner(RunnerBase):
    mode = "nospec"
    lookahead = 1

    def __init__(
        self, model, *, device, max_num_seqs, max_model_len, hooks, use_cuda_graphs: bool = True
    ):
        super().__init__(
            model,
            device=device,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            num_draws=1,
            hooks=hooks,
        )
        if use_cuda_graphs:
            self.enable_cuda_graphs(self._step)

    def _step(self, B: int) -> tuple:
        return tuple(
            nospec_step(
                self.model,
                self.cache,
                self.state,
                self.rng,
                B,
                self.hooks,
                self.fault,
                self.round_hints,
            )
        )

    def step(self) -> None:
        B, rows = self.begin_blocking_step()
        if B == 0:
            return
        out = StepOutputs(*self.run_round(self._step, B))
        self.apply_round(rows, self.transfer.wait(self.transfer.submit(out.host_view())))
