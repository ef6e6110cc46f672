"""White-box trace of the laws each round handed to the accept kernel (``generate(trace=True)``).

With tracing on, a block-speculation round also returns the p [B, W+1, V] and q [B, W, V]
that ``speculative_accept`` received (after the request's temperature/top-k/top-p and
after any mutant hook: exactly the kernel's inputs). Two steps move them to the host:

1. ``device_trace_view`` runs right after the round is submitted, on the compute stream:
   it copies the rows of traced requests out of the round's outputs (``index_select``,
   a device copy, never a host read; under CUDA Graphs the static outputs are
   overwritten by the next replay, so the copy must happen before it). The row indices
   are host-known (the snapshot's requests), uploaded without a sync, and travel with
   the copies, so the host can map them back.
2. ``HostTransfer`` carries them with the round's other outputs (a side stream into
   pinned memory on CUDA), and ``RoundTraces`` turns the collected arrays into one
   ``RoundTrace`` per committed row where the host already reads the round
   (``RunnerBase.apply_round``), before the row's tokens are committed.

The round's random draws travel the same way: its 3K+1 uniforms (draft j = 0..K-1,
then the accept block: coins, corrections, bonus) and the Philox (key, counter, word)
each came from (``trace_u``/``trace_origins``, -1 origins on rows that draw nothing),
so a caller checks that no two draws of a run share a counter (random streams
disjoint, issue 35).

Rows that the round served but that commit nothing (stale rows, a failed round) get no
entry: a trace entry is one of the request's ``rounds``, with the same index. Positions
past a row's stop point are traced (the kernel received them); positions past its
draft length L are not (p has rows 0..L, q rows 0..L-1). Tracing off costs nothing:
the round returns no p/q, and none of this runs.
"""

from __future__ import annotations

import numpy as np
import torch

from .outputs import RoundTrace
from .state import Request


def device_trace_view(
    p: torch.Tensor | None,  # [B, W+1, V] float32 the kernel's p, or None (not traced)
    q: torch.Tensor | None,  # [B, W, V] float32 the kernel's q
    drafts: torch.Tensor,  # [B, K] int64 -1 padded past W
    draft_lens: torch.Tensor,  # [B] int64
    rows: list[Request | None],  # the request of each row 0..B-1 (host records)
    upload,  # host list -> device int64 tensor without a blocking copy
    draws: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    # ([B, 3K+1] float64 uniforms, [B, 3K+1, 7] int64 their Philox origins)
) -> dict[str, torch.Tensor]:
    """Device copies of the traced requests' rows, keyed for ``HostTransfer``; {} when
    the round was not traced or serves no traced request."""
    if p is None:
        return {}
    traced = [b for b, r in enumerate(rows) if r is not None and r.output.trace is not None]
    if not traced:
        return {}
    idx = upload(traced, torch.int64)
    out = {
        "trace_rows": idx,
        "trace_p": p.index_select(0, idx),
        "trace_q": q.index_select(0, idx),
        "trace_drafts": drafts.index_select(0, idx),
        "trace_lens": draft_lens.index_select(0, idx),
    }
    u, origins = draws
    if u is not None and origins is not None:
        out["trace_u"] = u.index_select(0, idx)
        out["trace_origins"] = origins.index_select(0, idx)
    return out


class RoundTraces:
    """The traced rows of one collected round (host arrays)."""

    def __init__(self, host: dict[str, np.ndarray]):
        self.index = {int(b): i for i, b in enumerate(host["trace_rows"])}
        self.p, self.q = host["trace_p"], host["trace_q"]
        self.drafts, self.lens = host["trace_drafts"], host["trace_lens"]
        self.u, self.origins = host.get("trace_u"), host.get("trace_origins")

    @classmethod
    def from_host(cls, host: dict[str, np.ndarray]) -> RoundTraces | None:
        return cls(host) if "trace_rows" in host else None

    def record(self, row: int, req: Request) -> None:
        """Append row ``row``'s laws to ``req.output.trace``; call before the commit."""
        i = self.index.get(row)
        if i is None or req.output.trace is None:
            return
        L = int(self.lens[i])
        req.output.trace.append(
            RoundTrace(
                round=len(req.output.rounds),
                prefix_len=req.generated,
                drafts=[int(x) for x in self.drafts[i, :L]],
                p=np.array(self.p[i, : L + 1], dtype=np.float32),  # copies: ring buffers
                q=np.array(self.q[i, :L], dtype=np.float32),  # are reused
                uniforms=None if self.u is None else np.array(self.u[i], dtype=np.float64),
                origins=None if self.origins is None else np.array(self.origins[i], np.int64),
            )
        )
