"""The schema of ``kind: equality`` protocols: greedy token identity, deterministic.

Between configurations of one tree (``comparisons``), and, with ``base_ref``
(``--base-ref``), every configuration of the candidate (this tree) against the same
configuration of the base commit. Bounds: specconform.protocol.schema_base.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specconform.protocol.schema_base import (
    CONCURRENCY_MAX,
    GAP_MAX,
    K_MAX,
    LIST_MAX,
    TOKENS_MAX,
    BaseCandidate,
    DraftLoops,
    FilePath,
    GitRef,
    Name,
    ProtocolName,
    Seed,
    Strict,
    Text,
    TokenId,
    _unique,
    draft_loops_iff_drafting,
    known_sides,
    overridable,
)


def check_git_ref(ref: str | None) -> None:
    """A git ref given to `git` as an argument: not blank, and no leading '-' (git would
    read it as an option)."""
    if ref is not None and (not ref.strip() or ref.startswith("-")):
        raise ValueError("base_ref must be a git ref (e.g. HEAD~1 or main)")


class EqualityEngine(Strict):
    """The model both sides run (the same preset or checkpoint in each tree)."""

    preset: Literal["tiny", "small", "ouro-1.4b"]
    model_seed: Seed = 0
    checkpoint: FilePath | None = None
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    num_speculative_tokens: Annotated[int, Field(ge=1, le=K_MAX)] = 3


class PromptPlan(Strict):
    """`count` prompts of `length` token ids, uniform over the vocabulary from numpy's
    PCG64 seeded with `seed` (the same on both sides)."""

    count: Annotated[int, Field(ge=1, le=1000)]
    length: Annotated[int, Field(ge=1, le=TOKENS_MAX)]
    seed: Seed = 0


class EqualityConfig(Strict):
    """One greedy configuration: decoding mode, concurrency (max_num_seqs) and dtype."""

    name: Name
    mode: Literal["nospec", "sync", "async"]
    draft_loops: DraftLoops | None = None
    concurrency: Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)] = 1
    dtype: Literal["float32", "bfloat16"] = "float32"

    @model_validator(mode="after")
    def _draft_loops(self):
        return draft_loops_iff_drafting(self, "configuration")


class Comparison(BaseCandidate):
    """Within one tree: `candidate`'s greedy tokens must equal `base`'s, prompt by prompt."""


# Explicit prompts: at most as many as a PromptPlan draws, each at most TOKENS_MAX long.
ExplicitPrompts = Annotated[
    list[Annotated[list[TokenId], Field(min_length=1, max_length=TOKENS_MAX)]],
    Field(min_length=1, max_length=1000),
]


class EqualityProtocol(Strict):
    """Greedy token identity: between configurations of one tree (`comparisons`), and,
    with `base_ref` (`--base-ref`), every configuration of the candidate (this tree)
    against the same configuration of the base commit. Deterministic: no alpha."""

    kind: Literal["equality"]
    name: ProtocolName
    description: Text = ""
    engine: EqualityEngine
    prompts: PromptPlan | ExplicitPrompts
    max_tokens: Annotated[int, Field(ge=1, le=TOKENS_MAX)] = 128
    configurations: Annotated[list[EqualityConfig], Field(min_length=1, max_length=LIST_MAX)]
    comparisons: Annotated[list[Comparison], Field(max_length=LIST_MAX)] = []
    base_ref: GitRef | None = Field(None, json_schema_extra=overridable("--base-ref"))
    # A divergence whose top-2 log-probability gap (at T = 1, on either side) is below
    # this is labelled a near-tie; `near_ties: allow` then lets it pass (bf16 runs).
    near_tie_gap: Annotated[float, Field(ge=0.0, le=GAP_MAX)] = 1e-3
    near_ties: Literal["fail", "allow"] = "fail"

    @model_validator(mode="after")
    def _references(self):
        _unique(self.configurations, "configuration")
        _unique(self.comparisons, "comparison")
        names = {c.name for c in self.configurations}
        known_sides(self.comparisons, names, "comparison", "configuration")
        check_git_ref(self.base_ref)
        return self
