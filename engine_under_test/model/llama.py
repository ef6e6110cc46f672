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

The interface is the looped model's (``num_loops``, ``run_loops``, ``logits``,
``reference_logits``), with "loop" read as "stage", so every runner serves both.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .kv_cache import KVCache
from .layers import MLP, Attention, AttnContext, Embedding, Linear, RMSNorm, attention_context


class LlamaDecoderLayer(nn.Module):
    """Pre-norm layer; parameter names as in Hugging Face's LlamaDecoderLayer."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        inter: int,
        eps: float,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, **kw)
        self.mlp = MLP(hidden, inter, **kw)
        self.input_layernorm = RMSNorm(hidden, eps, **kw)
        self.post_attention_layernorm = RMSNorm(hidden, eps, **kw)

    def forward(
        self, h: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: AttnContext
    ) -> torch.Tensor:  # h [B, T, D]
        h = h + self.self_attn(self.input_layernorm(h), k_cache, v_cache, ctx)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaLM(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype: torch.dtype = torch.float32):
        super().__init__()
        if cfg.architecture != "llama":
            raise ValueError(f"LlamaLM needs architecture 'llama', got {cfg.architecture!r}")
        self.cfg = cfg
        kw = dict(device=device, dtype=dtype)
        D = cfg.hidden_size
        self.embed_tokens = Embedding(cfg.vocab_size, D, **kw)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(
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
        self.lm_head = (
            None if cfg.tie_word_embeddings else Linear(D, cfg.vocab_size, bias=False, **kw)
        )
        # Fitted exit maps, keyed by the exit depth d (str: ModuleDict keys); empty when
        # the draft head is "plain". Filled by exit_head.fit_exit_heads.
        self.exit_maps = nn.ModuleDict()
        ends = cfg.stage_layers
        self._bounds = list(zip((0, *ends[:-1]), ends, strict=True))  # [(first, end)] per stage

    # ------------------------------------------------------------------ pieces
    @property
    def num_loops(self) -> int:
        """S, the number of stages (the runners' "loops")."""
        return len(self._bounds)

    num_stages = num_loops

    def stage_layers(self, stage: int) -> range:
        first, end = self._bounds[stage]
        return range(first, end)

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        p = self.embed_tokens.weight
        return KVCache(
            1,
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

    run_stages = run_loops

    def _head(self, h: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., V] float32
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return torch.nn.functional.linear(self.norm(h), w).float()

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Target logits of the full-depth residual state: final norm + LM head."""
        return self._head(h)

    def exit_logits(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """Draft logits of the state after stage ``depth``: the fitted exit map of that
        depth (when there is one), then final norm + LM head. [..., D] -> [..., V] f32."""
        m = self.exit_maps[str(depth)] if str(depth) in self.exit_maps else None
        return self._head(h if m is None else m(h))

    # ------------------------------------------------------------------ reference
    @torch.no_grad()
    def hidden_states(
        self, tokens: list[int] | torch.Tensor, cache: KVCache | None = None
    ) -> list[torch.Tensor]:
        """Residual states of one prefix after every stage: S tensors [T, D]."""
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
        h, out = self.embed(ids), []
        for s in range(self.num_stages):
            h = self.run_loops(h, s, s + 1, cache, ctx)
            out.append(h[0])
        return out

    @torch.no_grad()
    def reference_logits(
        self,
        tokens: list[int] | torch.Tensor,
        loops: int | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Serial reference: logits [T, V] float32 of one prefix exiting after ``loops``
        stages (S when None; d < S reads the exit head of depth d)."""
        S = self.num_stages
        d = S if loops is None else loops
        if not 1 <= d <= S:
            raise ValueError(f"exit depth must be in [1, {S}], got {d}")
        h = self.hidden_states(tokens, cache)[d - 1]
        return self.logits(h) if d == S else self.exit_logits(h, d)
