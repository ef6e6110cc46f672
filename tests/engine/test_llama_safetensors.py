"""Hugging Face Llama checkpoints (config.json + safetensors) in the bundled engine: a
tiny randomly initialised transformers LlamaForCausalLM built in-process (no download),
saved, loaded by ``ModelConfig.from_pretrained`` and compared with transformers' own
forward; then run with random sampling in every mode, exiting after stage 1 of 2."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from engine_under_test import LLM, ModelConfig, SamplingParams, SpeculativeConfig
from engine_under_test.model import build_model
from engine_under_test.sampling import Sampler

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="pip install 'transformers<6'"
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    hf_cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        eos_token_id=2,
    )
    hf = LlamaForCausalLM(hf_cfg).eval()
    path = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(path, safe_serialization=True)
    cfg = ModelConfig.from_pretrained(path).replace(stage_layers=(2, 4))
    return hf, build_model(cfg)


def test_config_and_logits_match_transformers(pair):
    hf, ours = pair
    assert ours.cfg.architecture == "llama" and ours.num_stages == 2
    ids = [5, 17, 99, 3, 250, 42, 7]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0].float()
    mine = ours.reference_logits(ids)
    torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
    p = Sampler.probabilities(mine, SamplingParams(temperature=1.0))
    assert float((p - theirs.softmax(-1)).abs().max()) < 1e-5


@pytest.mark.parametrize("mode", ["nospec", "sync", "async"])
def test_modes_run_on_a_llama_checkpoint(pair, mode):
    _, ours = pair
    spec = None if mode == "nospec" else SpeculativeConfig(3, "block", 1)
    llm = LLM(model=ours, speculative_config=spec, async_scheduling=(mode == "async"))
    ps = [
        SamplingParams(temperature=1.0, top_k=20, seed=s, max_tokens=6, ignore_eos=True)
        for s in range(8)
    ]
    a = llm.generate([[5, 17, 99]] * 8, ps)
    b = llm.generate([[5, 17, 99]] * 8, ps)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert all(len(o.token_ids) == 6 for o in a)
    with pytest.raises(ValueError, match="draft_loops"):
        LLM(model=ours, speculative_config=SpeculativeConfig(3, "block", 2))
