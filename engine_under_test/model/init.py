"""Deterministic weights from a seed, shaped so that the draft approximates the target.

Every tensor is drawn on the CPU from one ``torch.Generator`` seeded with
``ModelConfig.seed`` in a fixed order, then copied to the model's device and dtype, so a
seed gives the same fp32 weights on CPU and CUDA.

Why the draft (loops 0..d-1) is close to the target (loops 0..R-1). A random rotation
splits the hidden space into an anchor subspace A, holding the token embeddings (with a
constant direction e0), and a working subspace S:

- attention reads A' = A minus e0 (queries = keys per kv group, so attention is content
  based and self-dominated) and writes S: the target t_i of position i, a context-mixed
  map of the anchors. ``input_layernorm_2`` fixes the step length.
- the MLP copies A onto itself exactly -- unit pairs (gate +-c_i, up e0, down +-c_i)
  give c_i y (silu(z) - silu(-z)) = c_i y z -- so the anchor keeps its direction;
  ``post_attention_layernorm_2`` fixes that step; both are
  set so that one loop (every layer) contracts by about ``loop_contraction``. A few random units
  (``mlp_noise``) add a small nonlinear term into S.
- the final norm inside the recurrence renormalises each loop, so the state converges
  geometrically to unit(gamma * anchor + beta * t): early loops make large moves, later
  loops small refinements, and q_d approaches p as d grows.

The LM head reads mostly S (``lm_s_share``) and the rest from A'. Measured first-position
TV(p, q_d) on ``DEFAULT_PROMPT``, temperature 1, fp32, seed 0 (a real Ouro-1.4B gives
about 0.35 for d=1 and 0.09 for d=2; ``tests/engine/test_model.py`` re-measures tiny):

    preset     d=1     d=2     d=3     p's top tokens
    tiny       0.349   0.102   0.034   0.489 0.299 0.059 0.058 0.024 0.023
    small      0.315   0.083   0.020   0.760 0.145 0.024 0.019 0.006 0.005
    ouro-1.4b  0.343   0.098   0.025   0.786 0.023 0.020 0.008 0.007 0.005

With top_k=20: tiny 0.344 / 0.103, small 0.299 / 0.078, ouro-1.4b 0.260 / 0.066. On
tiny, p(t2 | t1) for the five likeliest t1 has top probabilities 0.62, 0.50, 0.22, 0.31
and 0.70. Over 800 random 12-token prompts and all their positions the mean TVs are tiny
0.32 / 0.10 and small 0.35 / 0.12.
"""

from __future__ import annotations

import math

import torch

from ..config import ModelConfig
from .model import LoopedLM

# First-position TV(p, q_d) for d = 1, 2, 3 on DEFAULT_PROMPT, T=1, fp32, seed 0.
MEASURED_TV = {
    "tiny": (0.3488, 0.1017, 0.0343),
    "small": (0.3145, 0.0826, 0.0201),
    "ouro-1.4b": (0.3425, 0.0981, 0.0249),
}


def _orthonormal(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """[rows, cols] float32 with orthonormal columns (cols <= rows)."""
    a = torch.randn(rows, cols, generator=gen)
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r))[None, :]


@torch.no_grad()
def init_weights(model: LoopedLM, cfg: ModelConfig) -> None:
    """Fill ``model`` in place with the deterministic weights of ``cfg.seed``."""
    ic = cfg.init
    gen = torch.Generator(device="cpu").manual_seed(int(cfg.seed))
    D, V, inter = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    H, G, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    rep = H // G
    kA = min(max(2, int(round(ic.anchor_frac * D))), D - 1)
    basis = _orthonormal(D, D, gen)
    e0, Ap, S = basis[:, 0], basis[:, 1:kA], basis[:, kA:]  # [D], [D, kA-1], [D, kS]
    A = basis[:, :kA]

    def put(param: torch.nn.Parameter, value: torch.Tensor) -> None:
        param.copy_(value.to(device=param.device, dtype=param.dtype))

    def unit_rows(n: int, sub: torch.Tensor) -> torch.Tensor:
        """[n, D] random unit rows inside the span of ``sub`` [D, m]."""
        r = torch.randn(n, sub.shape[1], generator=gen)
        return (r / r.norm(dim=1, keepdim=True)) @ sub.T

    # Embeddings: A only, norm sqrt(D) (the scale of a normalised state).
    z = torch.randn(V, kA - 1, generator=gen)
    emb = ic.bias_coord * math.sqrt(kA - 1) * e0[None, :] + z @ Ap.T
    put(model.embed_tokens.weight, emb * math.sqrt(D) / emb.norm(dim=1, keepdim=True))

    n_copy = min(kA, inter // 2)
    # Per-layer step so that one loop (all layers) contracts by ~loop_contraction
    # whatever the depth of the stack.
    step = ic.loop_contraction ** (1.0 / cfg.num_hidden_layers) - 1.0
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        # Against a normalised state about half of whose energy is in A', each unit row
        # projects to ~N(0, 1/2), so the self score a^2 |K_g x|^2 / sqrt(hd) ~ attn_self.
        a2 = ic.attn_self * 2.0 / math.sqrt(hd) * (kA - 1) / D
        wk = unit_rows(G * hd, Ap) * math.sqrt(a2 * D / (kA - 1))
        put(attn.k_proj.weight, wk)
        put(attn.q_proj.weight, wk.view(G, 1, hd, D).expand(G, rep, hd, D).reshape(H * hd, D))
        put(
            attn.v_proj.weight,
            torch.randn(G * hd, kA - 1, generator=gen) @ Ap.T / math.sqrt(kA - 1),
        )
        put(
            attn.o_proj.weight,
            S @ torch.randn(S.shape[1], H * hd, generator=gen) / math.sqrt(H * hd),
        )
        gate = torch.zeros(inter, D)
        up = torch.zeros(inter, D)
        down = torch.zeros(D, inter)
        c = A[:, :n_copy].T  # [n_copy, D]
        gate[:n_copy], gate[n_copy : 2 * n_copy] = c, -c
        up[: 2 * n_copy] = e0
        down[:, :n_copy], down[:, n_copy : 2 * n_copy] = c.T, -c.T
        n_noise = inter - 2 * n_copy
        if n_noise:
            gate[2 * n_copy :] = torch.randn(n_noise, D, generator=gen) / math.sqrt(D)
            up[2 * n_copy :] = torch.randn(n_noise, D, generator=gen) / math.sqrt(D)
            # The copy output has norm ~ y |P_A x| ~ D/2 for a normalised x; scale the
            # random units' S output to mlp_noise of that.
            down[:, 2 * n_copy :] = (
                S
                @ torch.randn(S.shape[1], n_noise, generator=gen)
                * ic.mlp_noise
                * (D / 2)
                / math.sqrt(n_noise * D / 2)
            )
        put(mlp.gate_proj.weight, gate)
        put(mlp.up_proj.weight, up)
        put(mlp.down_proj.weight, down)
        layer.input_layernorm.weight.fill_(1.0)
        layer.post_attention_layernorm.weight.fill_(1.0)
        layer.input_layernorm_2.weight.fill_(step * ic.pull_ratio)
        layer.post_attention_layernorm_2.weight.fill_(step)
    model.norm.weight.fill_(1.0)
    put(model.early_exit_gate.weight, torch.zeros(1, D))
    model.early_exit_gate.bias.fill_(0.0)
    # Logit std ~ lm_scale against a normalised state with ~half its energy in S.
    gS = torch.randn(V, S.shape[1], generator=gen) @ S.T
    gA = torch.randn(V, kA - 1, generator=gen) @ Ap.T
    w = math.sqrt(ic.lm_s_share) * gS + math.sqrt(1.0 - ic.lm_s_share) * gA
    w = w * ic.lm_scale / math.sqrt(D / 2)
    if model.lm_head is not None:
        put(model.lm_head.weight, w)
