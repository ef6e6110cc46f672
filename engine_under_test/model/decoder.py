"""What the looped model and the Llama-family model share: ``DecoderLM``.

Both are an embedding, a stack of ``DecoderLayer``s (sandwich norms for the looped model,
pre-norm for Llama), a final RMSNorm and an LM head (tied to the embeddings, or not),
driven through one interface the runners use for both: ``num_loops`` (S, the stages a
draft may exit after), ``new_cache``, ``context``, ``embed``, ``run_loops``, ``logits``,
``exit_logits`` and the serial ``reference_logits``. A subclass says how a stage runs
(``run_loops``), how many KV namespaces a layer has (``kv_depths``) and what the draft
reads at depth d < S (``exit_logits``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .kv_cache import KVCache
from .layers import AttnContext, DecoderLayer, Embedding, Linear, RMSNorm, attention_context


class DecoderLM(nn.Module):
    """The shared trunk; subclasses register their own modules after ``norm``."""

    def __init__(self, cfg: ModelConfig, sandwich: bool, device=None, dtype=None):
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
                sandwich,
                **kw,
            )
            for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(D, cfg.rms_norm_eps, **kw)

    def untied_head(self, device=None, dtype=None) -> Linear | None:
        """A separate LM head [V, D], or None when it is the embedding matrix (tied)."""
        cfg = self.cfg
        if cfg.tie_word_embeddings:
            return None
        return Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=device, dtype=dtype)

    # ------------------------------------------------------------------ pieces
    @property
    def num_loops(self) -> int:
        """S, the number of stages (loops of a looped model, blocks of layers of Llama)."""
        raise NotImplementedError

    @property
    def num_stages(self) -> int:
        return self.num_loops

    def kv_depths(self) -> int:
        """KV namespaces per layer: one per loop that runs the layer."""
        raise NotImplementedError

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        p = self.embed_tokens.weight
        return KVCache(
            self.kv_depths(),
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
        h: torch.Tensor,  # [B, T, D] state entering stage `start`
        start: int,
        stop: int,
        cache: KVCache,
        ctx: AttnContext,
    ) -> torch.Tensor:  # [B, T, D]
        raise NotImplementedError

    def head_weight(self) -> torch.Tensor:  # [V, D]
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def exit_logits(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ reference
    @torch.no_grad()
    def reference_logits(
        self,
        tokens: list[int] | torch.Tensor,
        loops: int | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Serial reference: one full forward of one prefix, logits at every position.

        tokens: [T] ids; loops: exit depth d in [1, S] (S when None; d < S reads the
        draft's exit head of depth d). Returns [T, V] float32. Uses a fresh single-slot
        cache unless one is given (tests compare its KV contents).
        """
        S = self.num_stages
        d = S if loops is None else loops
        if not 1 <= d <= S:
            raise ValueError(f"exit depth must be in [1, {S}], got {d}")
        h, cache, ctx = self.prefill_input(tokens, cache)
        h = self.run_loops(h, 0, d, cache, ctx)[0]  # [T, D]
        return self.logits(h) if d == S else self.exit_logits(h, d)

    def prefill_input(
        self, tokens: list[int] | torch.Tensor, cache: KVCache | None
    ) -> tuple[torch.Tensor, KVCache, AttnContext]:
        """One prefix as a prefill of slot 0: (its embedding [1, T, D], the cache, a fresh
        single-slot one when None, and the attention context of positions 0..T-1)."""
        dev = self.embed_tokens.weight.device
        ids = torch.as_tensor(tokens, dtype=torch.int64, device=dev).view(1, -1)
        T = ids.shape[1]
        cache = cache if cache is not None else self.new_cache(1, T)
        ctx = self.context(
            torch.arange(T, device=dev).view(1, T),
            torch.zeros(1, dtype=torch.int64, device=dev),
            cache.max_len,
            True,
        )
        return self.embed(ids), cache, ctx
