"""Synchronous block speculation: submit a round, read it, schedule the next.

The host is authoritative: before each round it uploads every live row's last committed
token, its position and its remaining budget (``SlotState.host_sync_rows``), runs
``speculative_round`` and reads the result before anything else is submitted. On CUDA
the round is captured once per (batch bucket, draft width) and replayed, as in the
async runner; eager elsewhere. ``mode="pipeline"`` runs here too, greedy requests only
(the LLM facade rejects random sampling for it).
"""
from __future__ import annotations

from .base import RunnerBase
from .spec_round import RoundOutputs, speculative_round


class SyncBlockRunner(RunnerBase):
    mode = "sync"

    def __init__(self, model, *, device, max_num_seqs, max_model_len, hooks,
                 num_speculative_tokens: int, draft_loops: int, use_cuda_graphs: bool = True):
        K = num_speculative_tokens
        super().__init__(model, device=device, max_num_seqs=max_num_seqs,
                         max_model_len=max_model_len, num_draws=2 * K + 1, hooks=hooks)
        self.K, self.d = K, draft_loops
        self.lookahead = K + 1
        self._hints: dict = {}
        if use_cuda_graphs:
            self.enable_cuda_graphs(self._round)

    def _round(self, B: int, W: int) -> tuple:
        return tuple(speculative_round(self.model, self.cache, self.state, self.rng, B,
                                       self.K, self.d, self.hooks, self.fault, width=W,
                                       hints=self._hints))

    def step(self) -> None:
        B, rows = self.begin_blocking_step()
        if B == 0:
            return
        self._hints = self.sampling_hints(self.slots[:B])   # {} on CUDA
        out = RoundOutputs(*self.run_round(self._round, B, self.draft_width(rows, self.K)))
        self.apply_round(rows, self.transfer.wait(self.transfer.submit(out.host_view())))
