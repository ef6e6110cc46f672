"""The serial reference forward of one prefix, shared by the laws asked of it in a row.

A white-box check asks several laws of the same prefix one after another: the target
law p (all S stages), the draft law q (the first d stages), and, at a support
difference, both again without top-k/top-p. Each used to be a fresh full forward of the
prefix (``DecoderLM.reference_logits``), although the draft's forward is the first d
stages of the target's and the filters do not touch the logits at all.

``SerialReplay`` keeps the last prefix's forward: the residual state after every stage
reached so far (each [1, T, D]), the fresh cache and attention context it ran in, and
the logits of every depth asked, at every position ([T, V]: teacher forcing reads every
row; the last-position view kept before held the same storage). A deeper request
continues from the deepest state; a shallower one reads the state it passed through.
Every op runs on the same tensors with the same shapes as in ``reference_logits``
(``run_loops`` over stages a..b-1 is the composition of its single-stage runs; each
stage reads and writes only its own KV namespace), so the logits are bit for bit those
of a fresh forward (tests/engine/test_serial_replay.py checks it in every order). Only
the last prefix is kept: the callers ask a prefix's laws together, and a [1, T, D]
state per stage is small next to the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .kv_cache import KVCache
from .layers import AttnContext


@dataclass
class _Forward:
    """One prefix's forward so far."""

    prefix: tuple[int, ...]
    cache: KVCache
    ctx: AttnContext
    states: list[torch.Tensor]  # states[s]: [1, T, D] entering stage s (0: the embedding)
    logits: dict[int, torch.Tensor] = field(default_factory=dict)  # depth -> [T, V] float32


class SerialReplay:
    """Last-position logits of one prefix at any exit depth, one forward per prefix."""

    def __init__(self, model) -> None:
        """model: a LoopedLM or LlamaLM (``prefill_input``, ``run_loops``, ``logits``,
        ``exit_logits``, ``num_stages``)."""
        self.model = model
        self._last: _Forward | None = None

    @torch.no_grad()
    def last_logits(self, prefix: Sequence[int], depth: int) -> torch.Tensor:
        """Logits [V] float32 after ``depth`` stages at the last position of ``prefix``:
        equal to ``model.reference_logits(prefix, loops=depth)[-1]``."""
        return self.logits(prefix, depth)[-1]

    @torch.no_grad()
    def logits(self, prefix: Sequence[int], depth: int) -> torch.Tensor:
        """Logits [T, V] float32 after ``depth`` stages at every position of ``prefix``
        (T = len(prefix)): equal to ``model.reference_logits(prefix, loops=depth)``.
        Teacher forcing reads every row; its p and q laws of one generation share the
        forward. The tensor is the one kept here: callers must not write into it."""
        model = self.model
        S = model.num_stages
        if not 1 <= depth <= S:
            raise ValueError(f"exit depth must be in [1, {S}], got {depth}")
        key = tuple(int(t) for t in prefix)
        if not key:
            raise ValueError("prefix must hold at least one token")
        fwd = self._last
        if fwd is None or fwd.prefix != key:
            h, cache, ctx = model.prefill_input(list(key), None)
            fwd = self._last = _Forward(key, cache, ctx, [h])
        if depth not in fwd.logits:
            while len(fwd.states) <= depth:  # one stage at a time: every boundary kept
                s = len(fwd.states) - 1
                fwd.states.append(model.run_loops(fwd.states[s], s, s + 1, fwd.cache, fwd.ctx))
            h = fwd.states[depth][0]  # [T, D], as reference_logits passes it
            out = model.logits(h) if depth == S else model.exit_logits(h, depth)
            fwd.logits[depth] = out
        return fwd.logits[depth]

    def clear(self) -> None:
        self._last = None
