"""A plain Llama-family decoder (SmolLM2's architecture) cut into S stages.

    h = embed(tokens)
    for s in 0..S-1:                 # stage s = layers stage_layers[s-1]..stage_layers[s]-1
        for layer in stage s: h = h + attn(norm_in(h)); h = h + mlp(norm_post(h))
    logits = lm_head(norm(h))        # final norm + LM head (tied to the embeddings)

Pre-norm layers (no sandwich norms), grouped-query attention, rotate-half RoPE, SwiGLU,
tied embeddings. One loop: every layer runs once and owns one KV namespace
(``KVCache`` with a single "loop"), so the draft's stages and the verification's stages
never share a namespace, exactly as the looped model's depths do not.

Self-speculation by early exit (LayerSkip style): the draft runs stages 0..d-1 and reads
its law from the exit head of depth d (``exit_logits``); verification continues that very
residual state through stages d..S-1 (``run_loops(h_d, d, S)``), nothing recomputed. The
exit head is the final norm + LM head ("plain", the model's own head on a shallow state)
or, when fitted (``exit_head.py``), an affine map of the shallow state into the last
layer's residual space followed by the same final norm + LM head. The fitted map only
changes q; the states verification continues are the unmodified shallow states.

The trunk, the interface and the serial reference are ``DecoderLM``'s (decoder.py), shared
with the looped model, with "loop" read as "stage", so every runner serves both.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .decoder import DecoderLM
from .kv_cache import KVCache
from .layers import AttnContext


class LlamaLM(DecoderLM):
    def __init__(self, cfg: ModelConfig, device=None, dtype: torch.dtype = torch.float32):
        if cfg.architecture != "llama":
            raise ValueError(f"LlamaLM needs architecture 'llama', got {cfg.architecture!r}")
        super().__init__(cfg, sandwich=False, device=device, dtype=dtype)
        self.lm_head = self.untied_head(device=device, dtype=dtype)
        # Fitted exit maps, keyed by the exit depth d (str: ModuleDict keys); empty when
        # the draft head is "plain". Filled by exit_head.fit_exit_heads.
        self.exit_maps = nn.ModuleDict()
        ends = cfg.stage_layers
        self._bounds = list(zip((0, *ends[:-1]), ends, strict=True))  # [(first, end)] per stage

    @property
    def num_loops(self) -> int:
        """S, the number of stages (the runners' "loops")."""
        return len(self._bounds)

    def kv_depths(self) -> int:
        return 1  # one loop: every layer runs once

    def stage_layers(self, stage: int) -> range:
        first, end = self._bounds[stage]
        return range(first, end)

    def run_loops(
        self,
        h: torch.Tensor,  # [B, T, D] residual entering stage `start`
        start: int,
        stop: int,
        cache: KVCache,
        ctx: AttnContext,
    ) -> torch.Tensor:
        """Stages start..stop-1; returns the raw residual state [B, T, D] (no norm)."""
        for s in range(start, stop):
            for i in self.stage_layers(s):
                k, v = cache.layer(0, i)
                h = self.layers[i](h, k, v, ctx)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., V] float32
        """Target logits of the full-depth residual state: final norm + LM head."""
        return torch.nn.functional.linear(self.norm(h), self.head_weight()).float()

    def exit_logits(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """Draft logits of the state after stage ``depth``: the fitted exit map of that
        depth (when there is one), then final norm + LM head. [..., D] -> [..., V] f32."""
        m = self.exit_maps[str(depth)] if str(depth) in self.exit_maps else None
        return self.logits(h if m is None else m(h))

    @torch.no_grad()
    def hidden_states(
        self, tokens: list[int] | torch.Tensor, cache: KVCache | None = None
    ) -> list[torch.Tensor]:
        """Residual states of one prefix after every stage: S tensors [T, D]."""
        h, cache, ctx = self.prefill_input(tokens, cache)
        out = []
        for s in range(self.num_stages):
            h = self.run_loops(h, s, s + 1, cache, ctx)
            out.append(h[0])
        return out
