"""The looped decoder (Ouro-style): one layer stack applied R = ``total_ut_steps`` times.

    h = embed(tokens)
    for r in 0..R-1:            # one loop = every layer once, with loop r's KV namespace
        for layer in layers: h = layer(h, kv[r, layer])
        h = norm(h)             # the final norm sits inside the recurrence (as Ouro)
    logits = lm_head(h)         # the coda

Self-speculation uses the same weights at two depths: the draft law q reads the LM head
on the state after loop d-1 (``run_loops(h, 0, d)``); verification continues that very
state through loops d..R-1 (``run_loops(h_d, d, R)``) for the target law p. Parameter
names follow Ouro's Hugging Face checkpoint (``model.`` prefix added by the loader).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .kv_cache import KVCache
from .layers import AttnContext, DecoderLayer, Embedding, Linear, RMSNorm, attention_context


class LoopedLM(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg = cfg
        kw = dict(device=device, dtype=dtype)
        D = cfg.hidden_size
        self.embed_tokens = Embedding(cfg.vocab_size, D, **kw)
        self.layers = nn.ModuleList(
            DecoderLayer(
                D,
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                cfg.head_dim,
                cfg.intermediate_size,
                cfg.rms_norm_eps,
                **kw,
            )
            for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(D, cfg.rms_norm_eps, **kw)
        # Ouro's learned early-exit gate: stored and loaded for checkpoint fidelity, unused
        # (the engine exits at a fixed depth: d for the draft, R for the target).
        self.early_exit_gate = Linear(D, 1, bias=True, **kw)
        self.lm_head = (
            None if cfg.tie_word_embeddings else Linear(D, cfg.vocab_size, bias=False, **kw)
        )

    # ------------------------------------------------------------------ pieces
    @property
    def num_loops(self) -> int:
        return self.cfg.total_ut_steps

    num_stages = num_loops  # a stage of a looped model is one loop

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        p = self.embed_tokens.weight
        return KVCache(
            self.num_loops,
            len(self.layers),
            num_slots,
            self.cfg.num_key_value_heads,
            max_len,
            self.cfg.head_dim,
            p.device,
            p.dtype,
        )

    def context(
        self,
        positions: torch.Tensor,  # [B, T] int64 position of each new token
        rows: torch.Tensor,  # [B] int64 cache slots
        max_len: int,
        prefix: bool,
    ) -> AttnContext:
        return attention_context(
            positions, rows, max_len, prefix, self.cfg.head_dim, self.cfg.rope_theta
        )

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:  # [B, T] int64 -> [B, T, D]
        return self.embed_tokens(tokens)

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
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return torch.nn.functional.linear(h, w).float()

    def exit_logits(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """Draft logits after ``depth`` loops: the coda itself (the final norm is already
        inside every loop). Same signature as ``LlamaLM.exit_logits``."""
        return self.logits(h)

    # ------------------------------------------------------------------ reference
    @torch.no_grad()
    def reference_logits(
        self,
        tokens: list[int] | torch.Tensor,
        loops: int | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Serial reference: one full forward of one prefix, logits at every position.

        tokens: [T] ids; loops: exit depth (R when None). Returns [T, V] float32. Uses a
        fresh single-slot cache unless one is given (tests compare its KV contents).
        """
        dev = self.embed_tokens.weight.device
        ids = torch.as_tensor(tokens, dtype=torch.int64, device=dev).view(1, -1)
        T = ids.shape[1]
        loops = self.num_loops if loops is None else loops
        if cache is None:
            cache = self.new_cache(1, T)
        pos = torch.arange(T, device=dev).view(1, T)
        rows = torch.zeros(1, dtype=torch.int64, device=dev)
        ctx = self.context(pos, rows, cache.max_len, prefix=True)
        h = self.run_loops(self.embed(ids), 0, loops, cache, ctx)
        return self.logits(h)[0]
