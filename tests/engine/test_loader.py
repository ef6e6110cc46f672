"""Loader for Ouro's Hugging Face layout, on a small checkpoint generated here."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine_under_test import DEFAULT_PROMPT, LLM, ModelConfig, SamplingParams
from engine_under_test.model import build_model
from engine_under_test.model.loader import save_checkpoint

SMALL = {
    "vocab_size": 512,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 64,
    "total_ut_steps": 3,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip(tmp_path, dtype):
    cfg = ModelConfig.preset("tiny", seed=11, **SMALL)
    model = build_model(cfg, dtype=dtype)
    save_checkpoint(model, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["total_ut_steps"] == 3 and raw["model_type"] == "ouro"
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert "model.layers.1.input_layernorm_2.weight" in names
    assert "model.layers.0.post_attention_layernorm_2.weight" in names
    assert {
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
        "model.early_exit_gate.weight",
        "model.early_exit_gate.bias",
    } <= names

    loaded_cfg = ModelConfig.from_pretrained(tmp_path)
    assert loaded_cfg.checkpoint == str(tmp_path)
    loaded = build_model(loaded_cfg, dtype=dtype)
    for (n, a), b in zip(model.named_parameters(), loaded.parameters(), strict=True):
        assert a.dtype == b.dtype == dtype
        assert torch.equal(a, b), n
    torch.testing.assert_close(
        loaded.reference_logits(DEFAULT_PROMPT), model.reference_logits(DEFAULT_PROMPT)
    )
    # The engine serves the loaded checkpoint (directory path as model_config).
    llm = LLM(str(tmp_path), dtype=dtype)
    out = llm.generate([list(DEFAULT_PROMPT)], SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0].token_ids) >= 1


def test_fp32_checkpoint_loads_as_bf16(tmp_path):
    model = build_model(ModelConfig.preset("tiny", seed=2, **SMALL))
    save_checkpoint(model, tmp_path)
    loaded = build_model(ModelConfig.from_pretrained(tmp_path), dtype=torch.bfloat16)
    torch.testing.assert_close(
        loaded.embed_tokens.weight, model.embed_tokens.weight.to(torch.bfloat16)
    )


def test_mismatched_checkpoint_is_rejected(tmp_path):
    model = build_model(ModelConfig.preset("tiny", seed=2, **SMALL))
    save_checkpoint(model, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)  # ignored
    tensors["model.extra.weight"] = torch.ones(2)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="missing.*up_proj.*unexpected.*extra"):
        build_model(ModelConfig.from_pretrained(tmp_path))
