"""Llama-family GGUF files: weights dequantised to float32 (the shape: ``gguf_meta``).

Parsing and dequantisation are the ``gguf`` package's (``GGUFReader``, ``dequantize``),
the same functions transformers' GGUF loader calls, so every dequantised tensor is
bit-identical to transformers' (``tests/engine/test_smollm2_load.py`` checks each one).

One layout fact matters. llama.cpp's converter stores ``attn_q`` and ``attn_k`` with the
rows of each head permuted for its interleaved RoPE: within a head of ``hd`` rows, HF's
order (first half, second half: rotate-half RoPE) becomes pairs (row i, row i + hd/2)
side by side. Undoing it is a reshape of each head to [hd/2, 2] rows and a transpose to
[2, hd/2]. The heads counted are the query heads for ``attn_q`` and the key-value heads
for ``attn_k`` (GQA). ``attn_v`` and everything else is stored as HF has it.

GGUF name                      engine parameter (HF name without ``model.``)
token_embd.weight              embed_tokens.weight      (tied LM head when no output.weight)
blk.{i}.attn_norm.weight       layers.{i}.input_layernorm.weight
blk.{i}.attn_{q,k,v}.weight    layers.{i}.self_attn.{q,k,v}_proj.weight
blk.{i}.attn_output.weight     layers.{i}.self_attn.o_proj.weight
blk.{i}.ffn_norm.weight        layers.{i}.post_attention_layernorm.weight
blk.{i}.ffn_{gate,up,down}     layers.{i}.mlp.{gate,up,down}_proj.weight
output_norm.weight             norm.weight
output.weight                  lm_head.weight
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..config import ModelConfig
from ..gguf_meta import reader
from .layers import allocate, write_param
from .llama import LlamaLM

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}


def unpermute_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head RoPE row permutation: [n_heads*hd, D] -> same shape."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def engine_name(gguf_name: str) -> str | None:
    """A GGUF tensor name -> the engine's parameter name (None: not a model weight)."""
    base, _, suffix = gguf_name.rpartition(".")
    if suffix != "weight":
        return None
    if base.startswith("blk."):
        _, idx, kind = base.split(".", 2)
        mapped = _LAYER_NAMES.get(kind)
        return None if mapped is None else f"layers.{int(idx)}.{mapped}.weight"
    mapped = _TOP_NAMES.get(base)
    return None if mapped is None else f"{mapped}.weight"


def dequantized_tensors(path: Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Every model weight of the file as float32, in HF layout, by engine name."""
    from gguf import dequantize

    out: dict[str, torch.Tensor] = {}
    for t in reader(path).tensors:
        name = engine_name(t.name)
        if name is None:
            continue
        # A writable float32 copy (the reader's arrays are read-only memory maps).
        w = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
        if name.endswith("self_attn.q_proj.weight"):
            w = unpermute_rows(w, cfg.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            w = unpermute_rows(w, cfg.num_key_value_heads)
        out[name] = w
    return out


@torch.no_grad()
def load_llama_gguf(
    cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
):
    """Build the LlamaLM of ``cfg`` with the weights of ``cfg.gguf``."""
    model = allocate(LlamaLM, cfg, dtype=dtype, device=device)
    wanted = dict(model.named_parameters())
    tensors = dequantized_tensors(Path(cfg.gguf), cfg)
    missing = sorted(set(wanted) - set(tensors))
    unexpected = sorted(set(tensors) - set(wanted))
    if missing or unexpected:
        raise ValueError(
            f"{cfg.gguf} does not match its config: missing {missing[:6]}, "
            f"unexpected {unexpected[:6]}"
        )
    for name, param in wanted.items():
        write_param(name, tensors[name], param, "GGUF")
    return model.eval().requires_grad_(False)
