"""Synchronous block speculation: submit a round, read it, schedule the next.

The host is authoritative: before each round it uploads every live row's last committed
token, its position and its remaining budget (``SlotState.host_sync_rows``), runs
``speculative_round`` and reads the result before anything else is submitted. On CUDA
the round is captured once per (batch bucket, draft width) and replayed, as in the
async runner; eager elsewhere. ``mode="pipeline"`` runs here too, greedy requests only
(the LLM facade rejects random sampling for it).
"""

from __future__ import annotations

from .block_runner import BlockSpeculationRunner


class SyncBlockRunner(BlockSpeculationRunner):
    mode = "sync"

    def step(self) -> None:
        B, rows = self.begin_blocking_step()
        if B == 0:
            return
        out = self.run_spec_round(B, self.draft_width(rows, self.K))
        self.apply_round(rows, self.transfer.wait(self.transfer.submit(self.host_view(out, rows))))
