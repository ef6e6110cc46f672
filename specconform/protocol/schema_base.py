"""What every protocol schema shares: the strict base model and the input bounds.

Every integer, float, string and list field of a protocol has a stated range or length
(issue 37.1), so that hostile or mistyped input is refused at load time with one line
naming the field, never later by the engine, numpy or the file system. The bounds live
here as named types, each with the reason for its limit; `specconform schema` shows them
(``minimum``/``maximum``/``maxLength``/``maxItems``). docs/contracts.md section 6 lists
them. Floats are finite everywhere (``allow_inf_nan=False``): YAML's ``.inf``/``.nan``
and overflowing literals such as ``1e999`` are refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- integer bounds -------------------------------------------------------------------
# Seeds and seed offsets: the bundled engine's seeds are int64 Philox keys, [0, 2**63)
# (engine_under_test.params.SEED_LIMIT); numpy and torch refuse larger ones, late.
SEED_MAX = 2**63 - 1
# Per-group seed counts, requests, tolerated errors, sample sizes of checks: the largest
# seed plan (seeds.count) admitted, 10**8 (a run of that size takes days on a GPU).
COUNT_MAX = 100_000_000
# A stratum's sample count never exceeds seeds x generated tokens (10**8 x 4,096 < 10**12);
# a larger minimum could never be met (and 10**20 overflowed int64 in the evaluators).
SAMPLES_MAX = 10**12
# Vocabulary sizes and token ids: 2**18 = 262,144, above every supported tokenizer
# (Ouro 49,152; SmolLM2 49,152); top_k at or above the vocabulary is the same as off.
VOCAB_MAX = 262_144
TOKEN_ID_MAX = VOCAB_MAX - 1
# Generated tokens per request and prompt length: the engine's context bound.
TOKENS_MAX = 4096
# Draft depths (loops / stages) and layer indices: looped models have a handful of
# loops, the packaged decoders at most a few dozen layers.
DEPTH_MAX = 64
LAYER_MAX = 1024
# Speculated tokens per round (K) and draft positions: the engine's K <= 16.
K_MAX = 16
# Concurrency (running requests) and engine batch sizes: slots of one engine instance.
CONCURRENCY_MAX = 4096
BATCH_MAX = 1 << 20

# --- float bounds ---------------------------------------------------------------------
# Temperature: logits / T in float32; above 100 every law of the bundled models is
# uniform to within float32 rounding, so a larger T is a typo, not a test.
TEMPERATURE_MAX = 100.0
# Dirichlet concentrations and pooling thresholds (expected counts): 10**6 is far past
# any meaningful value (a concentration of 10**6 is already the uniform law).
SCALE_MAX = 1e6
# Unnormalised law masses: 262,144 entries below 10**9 sum to a finite float64.
MASS_MAX = 1e9
# Deterministic tolerances on |delta p| and log-probability gaps.
TOLERANCE_MAX = 1.0
GAP_MAX = 1000.0
# Seconds one engine adapter call may take (engine.call_timeout_s, adapters.watchdog).
# The default is far above any real call (the largest GPU batch, a 4,096-token sequence
# batch on CPU: minutes) and still ends a hung engine within the hour; a week bounds it.
CALL_TIMEOUT_DEFAULT_S = 3600.0
CALL_TIMEOUT_MAX_S = 7 * 24 * 3600.0
# An operating limit, not part of the claim: excluded from protocol.json and the hash.
CallTimeout = Annotated[float, Field(gt=0.0, le=CALL_TIMEOUT_MAX_S, exclude=True)]

# --- string and list bounds -------------------------------------------------------------
# Names (protocol, case, group, test): the protocol name starts the run id, which names a
# folder and a zip; 64 characters keep the run id (name, two hashes, a mutant) far below
# the file systems' 255-byte limit (a 10,000-character name was an OSError).
NAME_MAX = 64
# Free text (description): a paragraph, not a payload.
TEXT_MAX = 10_000
# File system paths (checkpoint): PATH_MAX on Linux.
PATH_MAX = 4096
# git refs (base_ref): git's own refname limit is far above any real ref; 255 bytes.
REF_MAX = 255
# Short strings (salt, stop sequences, adapter references, option keys).
SHORT_MAX = 256
# Entries of the lists of one protocol (cases, groups, tests, prompts, sampling cycles,
# strata bands): the largest shipped protocol lists 40; each entry costs engine work.
LIST_MAX = 1024
# Small lists (adapter options, stop ids, stage layers, concurrency levels, roles).
SMALL_LIST_MAX = 64

Probability = Annotated[float, Field(gt=0.0, lt=1.0)]
NonNegInt = Annotated[int, Field(ge=0, le=COUNT_MAX)]  # counts: see COUNT_MAX
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]  # seeds and offsets: see SEED_MAX
TokenId = Annotated[int, Field(ge=0, le=TOKEN_ID_MAX)]
TokenList = Annotated[list[TokenId], Field(max_length=TOKENS_MAX)]
TopK = Annotated[int, Field(ge=0, le=VOCAB_MAX)]  # 0: off
DraftLoops = Annotated[int, Field(ge=1, le=DEPTH_MAX)]
ProtocolName = Annotated[str, Field(pattern=r"^[a-z0-9_\-]+$", max_length=NAME_MAX)]
Name = Annotated[str, Field(pattern=r"^[a-z0-9_]+$", max_length=NAME_MAX)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]
GitRef = Annotated[str, Field(max_length=REF_MAX)]
FilePath = Annotated[str, Field(min_length=1, max_length=PATH_MAX)]
# An adapter reference: a builtin word or ``package.module:attribute`` (dotted Python
# identifiers), checked before anything is imported (``../../x:factory`` was a TypeError
# inside importlib). Engines have two builtin adapters, samplers one.
_FACTORY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
ENGINE_ADAPTER_PATTERN = rf"^(?:bundled|hf|{_FACTORY})$"
SAMPLER_ADAPTER_PATTERN = rf"^(?:bundled|{_FACTORY})$"
EngineAdapter = Annotated[str, Field(pattern=ENGINE_ADAPTER_PATTERN, max_length=SHORT_MAX)]
SamplerAdapter = Annotated[str, Field(pattern=SAMPLER_ADAPTER_PATTERN, max_length=SHORT_MAX)]
# Why a pattern failed, for the one-line error (pydantic's message only quotes the regex).
PATTERN_HINTS = {
    ENGINE_ADAPTER_PATTERN: "expected 'bundled', 'hf' or 'package.module:factory' "
    "(dotted Python identifiers)",
    SAMPLER_ADAPTER_PATTERN: "expected 'bundled' or 'package.module:factory' "
    "(dotted Python identifiers)",
}
# Why an upper bound, for the one-line error.
BOUND_HINTS = {SEED_MAX: "outside the engine's seed domain [0, 2**63)"}


def overridable(option: str) -> dict:
    """Schema marker: the CLI option that may override this field."""
    return {"overridable": option}


def omit_unset(data: dict, *keys: str) -> dict:
    """Leave ``keys`` out of a model's canonical JSON while they are None: a field added
    after protocols were written (``sequential``, ``verdict.inconclusive``, a test's
    ``combine``, ``min_position``) changes no existing protocol's hash."""
    for key in keys:
        if key in data and data[key] is None:
            del data[key]
    return data


class Strict(BaseModel):
    """Unknown keys, coercions and non-finite floats are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def _unique(items, what):
    seen = set()
    for item in items:
        if item.name in seen:
            raise ValueError(f"duplicate {what} name {item.name!r}")
        seen.add(item.name)
    return items


def draft_loops_iff_drafting(model, what: str):
    """A greedy configuration or McNemar group: draft_loops for sync/async, none for
    nospec (the error names ``what`` and the model's name)."""
    if (model.mode == "nospec") != (model.draft_loops is None):
        raise ValueError(
            f"{what} {model.name!r}: draft_loops is required for sync/async and not "
            "allowed for nospec"
        )
    return model


class BaseCandidate(Strict):
    """A named comparison of ``candidate`` against ``base``; the subclasses say what is
    compared."""

    name: Name
    base: Name
    candidate: Name
    role: Literal["primary", "secondary"] = "primary"


def known_sides(pairs, names: set[str], pair_word: str, item_word: str) -> None:
    """Every pair's base and candidate name one of ``names`` (ValueError otherwise)."""
    for pair in pairs:
        for side in (pair.base, pair.candidate):
            if side not in names:
                raise ValueError(f"{pair_word} {pair.name!r} names unknown {item_word} {side!r}")
