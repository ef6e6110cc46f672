"""The registry of planted bugs ("mutants") specconform must be able to kill.

Each mutant reproduces a real bug class seen in speculative-decoding engines. They are
off by default and reachable only by name: a kernel mutant through the explicit
`mutant=` argument of `engine_under_test.sampling.speculative_accept`, an engine
mutant through `LLM(..., mutant=name)`. Nothing here switches a mutant on; this module
only names and describes them, so protocols and the CLI can list and validate names.

layer "kernel": a bug inside the accept kernel, killable by the kernel protocols
(quadrature, montecarlo) with p, q and the uniforms given.
layer "engine": a bug in how the engine builds p, q, drafts, uniforms or inputs around
a correct kernel, killable only end to end (distribution, acceptance, equality). One
engine mutant is a fault rather than a bias: `nan_target_once` makes one round fail
(contract 3), so a run under it must report engine errors instead of a smaller sample.
"""

from __future__ import annotations

from dataclasses import dataclass

LAYERS = ("kernel", "engine")


@dataclass(frozen=True)
class Mutant:
    """One planted bug."""

    name: str  # the selector: `mutant=name`
    layer: str  # "kernel" or "engine"
    description: str  # one line: what the mutant changes
    bug_class: str  # the real bug class it reproduces
    # True for a fault (rounds fail, requests end in "error") rather than a biased law:
    # killed by a protocol's engine-error rule, not by a distribution test.
    fault: bool = False

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise ValueError(f"layer must be one of {LAYERS}, got {self.layer!r}")


_ALL = (
    # --- kernel: engine_under_test.sampling.accept ---------------------------------------
    Mutant(
        "residual_from_p",
        "kernel",
        "the correction token is drawn from p at the stop point instead of max(p - q, 0)",
        "rejection resampling from the target p instead of the residual (p - q)+",
    ),
    Mutant(
        "bonus_off_by_one",
        "kernel",
        "the bonus token is drawn from p at position draft_len - 1 (clamped at 0) "
        "instead of draft_len",
        "bonus token sampled from the target at position K instead of K+1",
    ),
    Mutant(
        "shared_uniform",
        "kernel",
        "the correction draw reuses the accept coin u[stop] instead of u[K + stop]",
        "acceptance coin reused as the resampling uniform (correlated randomness)",
    ),
    # --- engine: implemented by the engine's runners --------------------------------------
    Mutant(
        "greedy_draft",
        "engine",
        "drafts are the argmax of the draft logits while q is their softmax",
        "greedy draft scored with softmax q",
    ),
    Mutant(
        "target_default_params",
        "engine",
        "p is built with temperature 1 and no top-k/top-p while q uses the request's",
        "target probabilities built with default temperature/top-p",
    ),
    Mutant(
        "draft_raw_q",
        "engine",
        "q comes from the raw draft logits while drafts are sampled from filtered ones",
        "draft probabilities from unfiltered logits (q is not the law drafts came from)",
    ),
    Mutant(
        "residual_inplace",
        "engine",
        "q is modified in place before the residual max(p - q, 0) is formed",
        "in-place edit corrupting q before the residual",
    ),
    Mutant(
        "no_draft_probs",
        "engine",
        "q is treated as one-hot at the draft token; the law stays exact, acceptance drops",
        "draft probabilities not passed to the verifier (q assumed one-hot)",
    ),
    Mutant(
        "bonus_params",
        "engine",
        "the bonus token is sampled without the request's temperature/top-k/top-p",
        "bonus token sampled outside the sampling core with default params",
    ),
    Mutant(
        "bf16_q",
        "engine",
        "q is rounded to bfloat16 while p stays float32",
        "bf16 q against fp32 p",
    ),
    Mutant(
        "shared_rng",
        "engine",
        "uniforms are not request-owned: all rows of a round share one block",
        "per-request seeded generator ignored (batch rows share randomness)",
    ),
    Mutant(
        "async_stale_input",
        "engine",
        "the next round's device input is the last draft, not the last committed token",
        "async scheduling feeds a stale token to the next round",
    ),
    Mutant(
        "nan_target_once",
        "engine",
        "the target logits of one random row (position 0) are NaN in the engine's "
        "first decode round: that round fails and its live requests end in 'error'",
        "a numerical fault that silently drops the requests of one batch from the sample",
        fault=True,
    ),
)

MUTANTS: dict[str, Mutant] = {m.name: m for m in _ALL}


def list_mutants(layer: str | None = None) -> list[Mutant]:
    """Every registered mutant, or those of one layer ("kernel" or "engine")."""
    if layer is not None and layer not in LAYERS:
        raise ValueError(f"layer must be None or one of {LAYERS}, got {layer!r}")
    return [m for m in MUTANTS.values() if layer is None or m.layer == layer]


def get_mutant(name: str) -> Mutant:
    """The mutant called `name`; ValueError listing the valid names otherwise."""
    try:
        return MUTANTS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown mutant {name!r}; valid names: {', '.join(sorted(MUTANTS))}"
        ) from None
