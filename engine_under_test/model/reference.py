"""The reference forward batched over prefixes of one length (time to verdict, issue 16).

A distribution protocol replays hundreds of short prefixes that differ only in their last
token or two (every observed t1, every observed (t1, t2)): one forward of each through
``reference_logits`` is a few small kernels per layer repeated hundreds of times. Here
prefixes of equal length go through one prefill forward together, each in its own cache
slot with its own causal mask (no padding, no shared KV), exiting at the requested
depth; only the last position's logits are computed.

It is still the reference, not the engine's decode path: a fresh cache, a full prefill
of every prefix, no speculation, no runner state. It is not bit-identical to the
one-prefix forward (a GEMM over B rows may tile and round differently from one over one
row), so callers check it against ``reference_logits``: specconform's CheckedEngine
compares the laws of the first, middle and last prefix of every call with the serial
path (max |dp| <= 1e-4), and tests/engine/test_reference_batched.py compares every
prefix of a protocol-sized replay, support included.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Rows per forward: bounds the [B, V] float32 logits (49,152 x 4 B x 256 = 50 MB on the
# small preset) and the [B, T, D] activations; the call cost is flat well below this.
MAX_ROWS = 256


@torch.no_grad()
def batched_last_logits(model, prefixes: Sequence[Sequence[int]], depth: int) -> torch.Tensor:
    """Logits after ``depth`` stages at the last position of every prefix.

    model: a LoopedLM or LlamaLM (``embed``, ``run_loops``, ``logits``, ``exit_logits``,
        ``new_cache``, ``context``, ``num_stages``).
    prefixes: N token-id lists, each non-empty (lengths may differ: equal lengths are
        grouped into forwards of at most MAX_ROWS rows).
    depth: exit depth in [1, S]; S reads the target head, d < S the draft exit of d.
    Returns [N, V] float32 on the model's device, row i the logits of prefixes[i].
    """
    S = model.num_stages
    if not 1 <= depth <= S:
        raise ValueError(f"exit depth must be in [1, {S}], got {depth}")
    if any(len(p) == 0 for p in prefixes):
        raise ValueError("every prefix must hold at least one token")
    dev = model.embed_tokens.weight.device
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prefixes):
        by_length.setdefault(len(p), []).append(i)
    out: torch.Tensor | None = None
    for _length, rows in sorted(by_length.items()):
        for start in range(0, len(rows), MAX_ROWS):
            chunk = rows[start : start + MAX_ROWS]
            ids = torch.tensor([list(prefixes[i]) for i in chunk], dtype=torch.int64, device=dev)
            logits = _forward(model, ids, depth)  # [b, V] float32
            if out is None:
                out = torch.empty(
                    (len(prefixes), logits.shape[-1]), dtype=torch.float32, device=dev
                )
            out[torch.tensor(chunk, device=dev)] = logits
    if out is None:
        return torch.empty((0, model.cfg.vocab_size), dtype=torch.float32, device=dev)
    return out


def _forward(model, ids: torch.Tensor, depth: int) -> torch.Tensor:
    """ids [B, T] int64 -> [B, V] float32: one prefill of B prefixes, B cache slots."""
    B, T = ids.shape
    dev = ids.device
    cache = model.new_cache(B, T)
    positions = torch.arange(T, device=dev).view(1, T).expand(B, T)
    ctx = model.context(positions, torch.arange(B, device=dev), cache.max_len, True)
    h = model.run_loops(model.embed(ids), 0, depth, cache, ctx)  # [B, T, D]
    last = h[:, -1, :]  # [B, D]
    return model.logits(last) if depth == model.num_stages else model.exit_logits(last, depth)
