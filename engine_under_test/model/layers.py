"""Decoder building blocks shared by the looped (Ouro-style) and the Llama-family model.

RMSNorm, rotary position embeddings (rotate-half convention, as Llama/Ouro), SwiGLU,
and one decoder layer, pre-norm (Llama) or with Ouro's sandwich norms:

    h = h + input_layernorm_2(attn(input_layernorm(h)))
    h = h + post_attention_layernorm_2(mlp(post_attention_layernorm(h)))

Attention reads and writes one KV namespace (one depth, one layer) of ``KVCache``;
which rows and positions it touches is described by an ``AttnContext`` built once per
forward (shared by every layer and loop of that forward).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` without its default random initialisation.

    Every weight is written afterwards, by ``init_weights`` (seeded) or by the checkpoint
    loader, so the default init is wasted work; on the meta device its first call also
    imports ``torch._dynamo`` (1 to 3 s per process, most of a small run's start-up)."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    """``nn.Embedding`` without its default random initialisation (see ``Linear``)."""

    def reset_parameters(self) -> None:
        pass


def allocate(cls, cfg, *, dtype: torch.dtype, device) -> nn.Module:
    """``cls(cfg, dtype=dtype)`` with its tensors allocated on ``device``, uninitialised
    where a layer skips its random init (``Linear``, ``Embedding``): the caller writes
    every weight (seed, checkpoint, GGUF, weight cache). Not ``meta`` + ``to_empty``,
    which imports torch.fx's symbolic shapes and sympy: 0.5 s per process."""
    with torch.device(device):
        return cls(cfg, dtype=dtype)


def write_param(name: str, t: torch.Tensor, param: nn.Parameter, source: str) -> None:
    """``param`` <- ``t`` (cast to the parameter's dtype and device) once their shapes
    agree; ``source`` names where ``t`` came from in the error ("GGUF", "checkpoint")."""
    if tuple(t.shape) != tuple(param.shape):
        raise ValueError(
            f"{name}: {source} shape {tuple(t.shape)} != model shape {tuple(param.shape)}"
        )
    param.copy_(t.to(device=param.device, dtype=param.dtype))


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, cast back to the input dtype."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., D]
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


@dataclass
class AttnContext:
    """Where one forward reads and writes the KV cache.

    rows: [B] int64 cache slots of the batch rows.
    prefix: True when ``rows == arange(B)`` (slots 0..B-1): the cache is sliced, not
        gathered (the decode path; graph-friendly views).
    write_pos: [B, T] int64 positions the T new tokens are written at (clamped in range).
    mask: [B, 1, T, Lmax] bool, key position <= query position.
    cos, sin: [B, T, head_dim] float32 rotary tables for the new tokens.
    """

    rows: torch.Tensor
    prefix: bool
    write_pos: torch.Tensor
    mask: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float):
    """positions [B, T] int64 -> (cos, sin) each [B, T, head_dim] float32."""
    half = head_dim // 2
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, half, device=positions.device, dtype=torch.float32) / half)
    )
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [B, T, half]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def attention_context(
    positions: torch.Tensor,  # [B, T] int64 position of each new token
    rows: torch.Tensor,  # [B] int64 cache slots
    max_len: int,
    prefix: bool,
    head_dim: int,
    rope_theta: float,
) -> AttnContext:
    """Rotary tables, causal mask and clamped write positions for one forward (shared by
    the looped model and the Llama-family one)."""
    keys = torch.arange(max_len, device=positions.device)
    mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, T, Lmax]
    cos, sin = rope_tables(positions, head_dim, rope_theta)
    # Stale or padded tokens may sit past the end; clamping keeps their (ignored)
    # writes inside their own slot instead of raising or touching another slot.
    write_pos = positions.clamp(0, max_len - 1)
    return AttnContext(rows=rows, prefix=prefix, write_pos=write_pos, mask=mask, cos=cos, sin=sin)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, hd]; cos/sin [B, T, hd] float32 -> rotated x, same dtype."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    out = xf * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.to(x.dtype)


class Attention(nn.Module):
    def __init__(
        self, hidden: int, heads: int, kv_heads: int, head_dim: int, device=None, dtype=None
    ):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        kw = dict(bias=False, device=device, dtype=dtype)
        self.q_proj = Linear(hidden, heads * head_dim, **kw)
        self.k_proj = Linear(hidden, kv_heads * head_dim, **kw)
        self.v_proj = Linear(hidden, kv_heads * head_dim, **kw)
        self.o_proj = Linear(heads * head_dim, hidden, **kw)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, D]
        k_cache: torch.Tensor,  # [S, kv_heads, Lmax, hd] (one depth, one layer)
        v_cache: torch.Tensor,  # [S, kv_heads, Lmax, hd]
        ctx: AttnContext,
    ) -> torch.Tensor:
        B, T, _ = x.shape
        H, G, hd = self.heads, self.kv_heads, self.head_dim
        q = apply_rope(self.q_proj(x).view(B, T, H, hd), ctx.cos, ctx.sin)
        k = apply_rope(self.k_proj(x).view(B, T, G, hd), ctx.cos, ctx.sin)
        v = self.v_proj(x).view(B, T, G, hd)
        # Write first, then attend over the whole (masked) cache row: the new tokens see
        # themselves and every earlier position of their own depth's namespace.
        rows = ctx.rows[:, None].expand(B, T)
        _write(k_cache, rows, ctx.write_pos, k)
        _write(v_cache, rows, ctx.write_pos, v)
        if ctx.prefix:
            keys, values = k_cache[:B], v_cache[:B]  # views, no copy
        else:
            keys, values = k_cache[ctx.rows], v_cache[ctx.rows]  # gather
        # Grouped-query attention without repeating K/V: fold each group's query heads
        # into the query-length axis so every kv head serves its H/G query heads.
        rep = H // G
        qg = q.permute(0, 2, 1, 3).reshape(B, G, rep * T, hd)
        mask = ctx.mask if rep == 1 else ctx.mask.repeat(1, 1, rep, 1)
        out = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask)
        out = out.reshape(B, H, T, hd).permute(0, 2, 1, 3).reshape(B, T, H * hd)
        return self.o_proj(out)


def _write(
    cache: torch.Tensor,  # [S, G, Lmax, hd]
    rows: torch.Tensor,  # [B, T] int64
    pos: torch.Tensor,  # [B, T] int64
    new: torch.Tensor,
) -> None:  # [B, T, G, hd]
    # Advanced indices separated by a slice put their dims first: cache[rows, :, pos] is
    # [B, T, G, hd], exactly the layout of `new`.
    cache[rows, :, pos] = new.to(cache.dtype)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, inter: int, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = Linear(hidden, inter, **kw)
        self.up_proj = Linear(hidden, inter, **kw)
        self.down_proj = Linear(inter, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One decoder layer of either model; parameter names as in the HF checkpoints.

    Pre-norm (Llama, ``sandwich=False``):
        h = h + attn(input_layernorm(h));  h = h + mlp(post_attention_layernorm(h))
    Sandwich norms (Ouro, ``sandwich=True``): each branch's output is normed again before
    the add, by ``input_layernorm_2`` and ``post_attention_layernorm_2``. Those two
    exist only with sandwich norms, so a Llama checkpoint's names match exactly.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        inter: int,
        eps: float,
        sandwich: bool,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.sandwich = sandwich
        # Registration order is the parameters' order (state dicts, checkpoints).
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, **kw)
        self.mlp = MLP(hidden, inter, **kw)
        self.input_layernorm = RMSNorm(hidden, eps, **kw)
        if sandwich:
            self.input_layernorm_2 = RMSNorm(hidden, eps, **kw)
        self.post_attention_layernorm = RMSNorm(hidden, eps, **kw)
        if sandwich:
            self.post_attention_layernorm_2 = RMSNorm(hidden, eps, **kw)

    def forward(
        self,
        h: torch.Tensor,  # [B, T, D] residual
        k_cache: torch.Tensor,  # [S, kv_heads, Lmax, hd] (one depth, one layer)
        v_cache: torch.Tensor,  # [S, kv_heads, Lmax, hd]
        ctx: AttnContext,
    ) -> torch.Tensor:  # [B, T, D]
        a = self.self_attn(self.input_layernorm(h), k_cache, v_cache, ctx)
        h = h + (self.input_layernorm_2(a) if self.sandwich else a)
        m = self.mlp(self.post_attention_layernorm(h))
        return h + (self.post_attention_layernorm_2(m) if self.sandwich else m)
