"""Load and save checkpoints in Ouro's Hugging Face layout (config.json + safetensors).

Hugging Face Llama checkpoints (``model_type: llama``) load through the same path into
a ``LlamaLM``: their names are the list below without the sandwich norms
(``input_layernorm`` / ``post_attention_layernorm`` only), the final norm outside any
loop, and no early-exit gate.

Parameter names, as in ``ByteDance/Ouro-1.4B``::

    model.embed_tokens.weight                          [V, D]
    model.layers.{i}.self_attn.{q,k,v,o}_proj.weight   (no biases)
    model.layers.{i}.mlp.{gate,up,down}_proj.weight
    model.layers.{i}.input_layernorm.weight            sandwich norms around attention
    model.layers.{i}.input_layernorm_2.weight
    model.layers.{i}.post_attention_layernorm.weight   sandwich norms around the MLP
    model.layers.{i}.post_attention_layernorm_2.weight
    model.norm.weight                                  the final norm (inside the loop)
    model.early_exit_gate.{weight,bias}                learned exit gate (loaded, unused)
    lm_head.weight                                     absent when tie_word_embeddings

A single ``model.safetensors`` or shards listed by ``model.safetensors.index.json``.
Tensors are converted to the requested dtype on load; rotary ``inv_freq`` buffers, if
present, are ignored (recomputed from rope_theta).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..config import ModelConfig
from .layers import allocate, write_param
from .llama import LlamaLM
from .model import LoopedLM


def hf_name(name: str) -> str:
    """Our parameter name -> the checkpoint's."""
    return name if name.startswith("lm_head.") else f"model.{name}"


def _files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if single.exists():
        return [single]
    found = sorted(path.glob("*.safetensors"))
    if not found:
        raise FileNotFoundError(f"no safetensors file in {path}")
    return found


@torch.no_grad()
def load_checkpoint(
    cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> LoopedLM:
    """Build the model of ``cfg`` with the weights stored in ``cfg.checkpoint``."""
    path = Path(cfg.checkpoint)
    # HF LlamaForCausalLM names are LlamaLM's + "model.", as Ouro's are LoopedLM's.
    cls = LlamaLM if cfg.architecture == "llama" else LoopedLM
    model = allocate(cls, cfg, dtype=dtype, device=device)
    wanted = {hf_name(n): p for n, p in model.named_parameters()}
    seen: set[str] = set()
    unexpected = []
    for file in _files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for key in f.keys():
                if key.endswith("rotary_emb.inv_freq"):
                    continue
                param = wanted.get(key)
                if param is None and key == "lm_head.weight" and cfg.tie_word_embeddings:
                    continue  # a tied head saved anyway: the embeddings are the head
                if param is None:
                    unexpected.append(key)
                    continue
                write_param(key, f.get_tensor(key), param, "checkpoint")
                seen.add(key)
    missing = sorted(set(wanted) - seen)
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match the config: missing "
            f"{missing[:8]}{'...' if len(missing) > 8 else ''}, unexpected "
            f"{unexpected[:8]}{'...' if len(unexpected) > 8 else ''}"
        )
    return model.eval().requires_grad_(False)


def save_checkpoint(model: LoopedLM, path: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``model`` as config.json + model.safetensors (Ouro's layout)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg.to_hf_dict()
    dt = dtype or next(model.parameters()).dtype
    cfg["torch_dtype"] = str(dt).replace("torch.", "")
    (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    tensors = {
        hf_name(n): p.detach().to(device="cpu", dtype=dt).contiguous()
        for n, p in model.named_parameters()
    }
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
