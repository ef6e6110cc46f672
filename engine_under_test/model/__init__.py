"""The looped (Ouro-style) decoder, its per-depth KV cache, initialisation and loader."""
from __future__ import annotations

import torch

from ..config import ModelConfig
from .init import init_weights
from .kv_cache import KVCache
from .model import LoopedLM

__all__ = ["KVCache", "LoopedLM", "build_model", "init_weights"]


def build_model(cfg: ModelConfig, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> LoopedLM:
    """The model of ``cfg``: weights from ``cfg.checkpoint`` when set, else from the seed."""
    if cfg.checkpoint is not None:
        from .loader import load_checkpoint
        return load_checkpoint(cfg, device=device, dtype=dtype)
    with torch.device("meta"):
        model = LoopedLM(cfg, dtype=dtype)
    model = model.to_empty(device=device)
    init_weights(model, cfg)
    return model.eval().requires_grad_(False)
