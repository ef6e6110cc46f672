"""What the sync and async block-speculation runners share (``BlockSpeculationRunner``)."""

from __future__ import annotations

from .base import RunnerBase
from .law_trace import device_trace_view
from .spec_round import RoundOutputs, speculative_round
from .state import Request


class BlockSpeculationRunner(RunnerBase):
    """What the sync and async block-speculation runners share: K drafts at depth d per
    round, 2K+1 request-owned uniforms per round, K+1 KV positions of lookahead, and
    the round itself (``speculative_round``), graph-captured per (B, W, traced) on CUDA
    (a traced round also returns its p and q, so it is its own graph)."""

    def __init__(
        self,
        model,
        *,
        device,
        max_num_seqs,
        max_model_len,
        hooks,
        num_speculative_tokens: int,
        draft_loops: int,
        use_cuda_graphs: bool = True,
    ):
        K = num_speculative_tokens
        super().__init__(
            model,
            device=device,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            num_draws=2 * K + 1,
            hooks=hooks,
        )
        self.K, self.d = K, draft_loops
        self.lookahead = K + 1
        if use_cuda_graphs:
            self.enable_cuda_graphs(self._round)

    def _speculative_round(self, B: int, W: int, trace: bool = False) -> RoundOutputs:
        return speculative_round(
            self.model,
            self.cache,
            self.state,
            self.rng,
            B,
            self.K,
            self.d,
            self.hooks,
            self.fault,
            width=W,
            hints=self.round_hints,
            trace=trace,
        )

    def _round(self, B: int, W: int, trace: bool = False) -> tuple:
        return tuple(self._speculative_round(B, W, trace))

    def run_spec_round(self, B: int, W: int) -> RoundOutputs:
        """One round for slots 0..B-1 drafting at most W tokens (graph replay on CUDA);
        traced while ``law_trace`` is on."""
        return RoundOutputs(*self.run_round(self._round, B, W, self.law_trace))

    def host_view(self, out: RoundOutputs, rows: list[Request | None]) -> dict:
        """What the host collects of a round: its results, and in trace mode device
        copies of the traced rows' laws (runners/law_trace.py); no host reads."""
        view = out.host_view()
        view.update(
            device_trace_view(
                out.trace_p,
                out.trace_q,
                out.drafts,
                out.draft_lens,
                rows,
                self.state.upload,
                (out.trace_u, out.trace_origins),
            )
        )
        return view
