"""GGUF metadata: the file reader and a Llama-family file's shape as ModelConfig fields.

Below ``config`` in the import order: ``ModelConfig.from_gguf`` builds its config from
``llama_config_fields``, and ``model/gguf.py`` (weights, dequantisation, loading) reads
the file through ``reader``. Neither imports the other, so config and the model package
form no import cycle. The ``gguf`` package itself is imported on the first read: it is
an optional dependency (the engine extra), not needed for the looped presets.
"""

from __future__ import annotations

from pathlib import Path


def reader(path: Path):
    """A ``gguf.GGUFReader`` of ``path`` (a memory map; tensors are read lazily)."""
    try:
        from gguf import GGUFReader
    except ImportError:  # pragma: no cover - gguf is a dependency of the engine extra
        raise RuntimeError("reading GGUF files needs the gguf package: pip install gguf") from None
    return GGUFReader(str(path))


def _field(r, key: str, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def llama_config_fields(
    path: Path,
    stage_layers: tuple[int, ...] | None = None,
    draft_head: str = "plain",
    name: str | None = None,
) -> dict:
    """The ModelConfig keyword arguments of a Llama-family GGUF file (architecture
    "llama"; ``stage_layers`` None: one stage per layer)."""
    r = reader(path)
    arch = _field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: GGUF architecture {arch!r}; only 'llama' is supported")
    g = lambda k, d=None: _field(r, f"llama.{k}", d)  # noqa: E731
    layers, hidden, heads = (
        int(g("block_count")),
        int(g("embedding_length")),
        int(g("attention.head_count")),
    )
    tokens = _field(r, "tokenizer.ggml.tokens")
    vocab = int(g("vocab_size", len(tokens) if tokens is not None else 0))
    names = {t.name for t in r.tensors}
    return dict(
        name=name or str(_field(r, "general.name", path.stem)),
        architecture="llama",
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(g("attention.head_count_kv", heads)),
        head_dim=int(g("rope.dimension_count", hidden // heads)),
        intermediate_size=int(g("feed_forward_length")),
        total_ut_steps=1,
        rope_theta=float(g("rope.freq_base", 10000.0)),
        rms_norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(g("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        eos_token_id=int(_field(r, "tokenizer.ggml.eos_token_id", 0)),
        gguf=str(path),
        draft_head=draft_head,
        stage_layers=tuple(stage_layers) if stage_layers else tuple(range(1, layers + 1)),
    )
