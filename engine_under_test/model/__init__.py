"""The models: the looped (Ouro-style) decoder with its per-depth KV cache, seeded
initialisation and loader, and Llama-family checkpoints read from GGUF (``llama.py``,
``gguf.py``, fitted draft exit heads in ``exit_head.py``)."""

from __future__ import annotations

import torch

from ..config import ModelConfig
from .init import init_weights
from .kv_cache import KVCache
from .layers import allocate
from .model import LoopedLM
from .weight_cache import memoised

__all__ = ["KVCache", "LoopedLM", "build_model", "init_weights"]


def build_model(
    cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> LoopedLM:  # or a LlamaLM
    """The model of ``cfg``: a Llama-family GGUF (architecture "llama"), else the looped
    model with weights from ``cfg.checkpoint`` when set, else from the seed (memoised on
    disk when ``ENGINE_UNDER_TEST_WEIGHT_CACHE`` names a folder: weight_cache.py).

    The loaders (and the exit-head fit) are imported on use: they bring file-format
    packages (numpy, safetensors) that a seeded model, the common case, never needs."""
    if cfg.architecture == "llama":
        if cfg.gguf is not None:
            from .gguf import load_llama_gguf

            model = load_llama_gguf(cfg, device=device, dtype=dtype)
        elif cfg.checkpoint is not None:  # HF Llama layout: config.json + safetensors
            from .loader import load_checkpoint

            model = load_checkpoint(cfg, device=device, dtype=dtype)
        else:
            raise ValueError(
                "a llama ModelConfig needs gguf= or checkpoint= "
                "(ModelConfig.packaged / from_gguf / from_pretrained)"
            )
        if cfg.draft_head == "fitted":
            from .exit_head import fit_exit_heads

            fit_exit_heads(model)
        return model
    if cfg.checkpoint is not None:
        from .loader import load_checkpoint

        return load_checkpoint(cfg, device=device, dtype=dtype)

    model = memoised(  # weight_cache.py
        cfg,
        dtype,
        lambda: allocate(LoopedLM, cfg, dtype=dtype, device=device),
        lambda m: init_weights(m, cfg),
    )
    return model.eval().requires_grad_(False)
