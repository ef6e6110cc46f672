"""The looped decoder (Ouro-style): one layer stack applied R = ``total_ut_steps`` times.

    h = embed(tokens)
    for r in 0..R-1:            # one loop = every layer once, with loop r's KV namespace
        for layer in layers: h = layer(h, kv[r, layer])
        h = norm(h)             # the final norm sits inside the recurrence (as Ouro)
    logits = lm_head(h)         # the coda

Self-speculation uses the same weights at two depths: the draft law q reads the LM head
on the state after loop d-1 (``run_loops(h, 0, d)``); verification continues that very
state through loops d..R-1 (``run_loops(h_d, d, R)``) for the target law p. Parameter
names follow Ouro's Hugging Face checkpoint (``model.`` prefix added by the loader). The
trunk (embedding, layers with sandwich norms, final norm, LM head), the KV cache layout
and the serial reference are ``DecoderLM``'s (decoder.py), shared with ``LlamaLM``.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig
from .decoder import DecoderLM
from .kv_cache import KVCache
from .layers import AttnContext, Linear


class LoopedLM(DecoderLM):
    def __init__(self, cfg: ModelConfig, device=None, dtype: torch.dtype = torch.float32):
        super().__init__(cfg, sandwich=True, device=device, dtype=dtype)
        # Ouro's learned early-exit gate: stored and loaded for checkpoint fidelity, unused
        # (the engine exits at a fixed depth: d for the draft, R for the target).
        self.early_exit_gate = Linear(cfg.hidden_size, 1, bias=True, device=device, dtype=dtype)
        self.lm_head = self.untied_head(device=device, dtype=dtype)

    @property
    def num_loops(self) -> int:
        return self.cfg.total_ut_steps  # a stage of a looped model is one loop

    def kv_depths(self) -> int:
        return self.num_loops  # every loop runs every layer

    def run_loops(
        self,
        h: torch.Tensor,  # [B, T, D] state entering loop `start`
        start: int,
        stop: int,
        cache: KVCache,
        ctx: AttnContext,
    ) -> torch.Tensor:
        """Loops start..stop-1 (each writes its own KV namespace); returns [B, T, D]."""
        for r in range(start, stop):
            for i, layer in enumerate(self.layers):
                k, v = cache.layer(r, i)
                h = layer(h, k, v, ctx)
            h = self.norm(h)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., V] float32
        """The coda: the LM head alone (the final norm is inside every loop)."""
        return torch.nn.functional.linear(h, self.head_weight()).float()

    def exit_logits(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """Draft logits after ``depth`` loops: the coda itself (the final norm is already
        inside every loop). Same signature as ``LlamaLM.exit_logits``."""
        return self.logits(h)
