"""The tree kind's protocol schema (issue 34): tree speculation verified one level at a
time, target only (the candidates are fixed tokens, as SGLang's
``tree_speculative_sampling_target_only`` receives them).

A case is one tree: ``parents[i]`` is node i's parent (node 0, the root, is the last
verified token and has parent -1; a parent precedes its children), ``tokens[i]`` the
candidate token node i stands for (the root's is ignored), ``laws[i]`` the target law p
of the token that follows node i. Siblings are tried in node order. ``grid`` is the
quadrature grid per uniform axis (one axis per tree level plus the final draw).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specconform.protocol.schema import FamilyVerdict, LawSpec, SeedPlan, _with_verdict
from specconform.protocol.schema_base import (
    SHORT_MAX,
    SMALL_LIST_MAX,
    Name,
    Probability,
    ProtocolName,
    Strict,
    Text,
    _unique,
    overridable,
)

# Nodes per tree (SGLang's num_draft_tokens is at most a few dozen) and tree height:
# quadrature runs grid ** (height + 1) rows.
NODES_MAX = 64
TREE_VOCAB_MAX = 4096
NodeIndex = Annotated[int, Field(ge=-1, lt=NODES_MAX)]  # -1: the root's parent
NodeToken = Annotated[int, Field(ge=-1, lt=TREE_VOCAB_MAX)]  # the root's token is ignored
TREE_ADAPTER_PATTERN = r"^(reference|[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*)$"


class TreeCase(Strict):
    name: Name
    vocab: Annotated[int, Field(ge=2, le=TREE_VOCAB_MAX)]
    parents: Annotated[list[NodeIndex], Field(min_length=1, max_length=NODES_MAX)]
    tokens: Annotated[list[NodeToken], Field(min_length=1, max_length=NODES_MAX)]
    laws: Annotated[list[LawSpec], Field(min_length=1, max_length=NODES_MAX)]
    grid: Annotated[int, Field(ge=4, le=256)] = 32

    @model_validator(mode="after")
    def _tree(self):
        n = len(self.parents)
        if len(self.tokens) != n or len(self.laws) != n:
            raise ValueError("parents, tokens and laws need one entry per node")
        if self.parents[0] != -1:
            raise ValueError("node 0 is the root: parents[0] must be -1")
        for i, parent in enumerate(self.parents[1:], start=1):
            if not 0 <= parent < i:
                raise ValueError(f"node {i}: its parent must be an earlier node")
            if not 0 <= self.tokens[i] < self.vocab:
                raise ValueError(f"node {i}: token {self.tokens[i]} outside the vocabulary")
        for i, law in enumerate(self.laws):
            if isinstance(law, list) and len(law) != self.vocab:
                raise ValueError(f"node {i}: an explicit law needs {self.vocab} masses")
            if isinstance(law, list) and sum(law) <= 0:
                raise ValueError(f"node {i}: an explicit law needs positive mass")
        return self


class ThresholdSetting(Strict):
    """SGLang's lossy knobs (1.0 and 1.0: exact): accept a candidate when the coin is at
    most the siblings' cumulative target mass / threshold_acc, or when its own target
    mass reaches threshold_single."""

    threshold_single: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    threshold_acc: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0


class TreeSamplerSpec(Strict):
    # "reference": specconform's exact tree sampler; else a factory module:callable
    # called with device=, mutant=, threshold_single=, threshold_acc=.
    adapter: Annotated[str, Field(pattern=TREE_ADAPTER_PATTERN, max_length=SHORT_MAX)] = "reference"


class TreeProtocol(Strict):
    kind: Literal["tree"]
    name: ProtocolName
    description: Text = ""
    # grid: quadrature over the injected uniforms (white-box samplers); sampled: Monte Carlo,
    # Pearson chi-square per position, or the TV rows when max_tv is set.
    method: Literal["grid", "sampled"]
    alpha: Probability = 0.01
    min_expected: Annotated[float, Field(gt=0.0, le=1000.0)] = 5.0
    # Not `sampler`: preflight reads that as a chain kernel's adapter (bundled or a factory).
    tree_sampler: TreeSamplerSpec = TreeSamplerSpec()
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    seeds: SeedPlan | None = None  # sampled: rows per case and setting
    # A sampler lossy by design: the verdict reads the TV rows (upper end of each
    # simultaneous interval <= max_tv) instead of goodness of fit.
    max_tv: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    settings: Annotated[list[ThresholdSetting], Field(min_length=1, max_length=SMALL_LIST_MAX)] = [
        ThresholdSetting()
    ]
    cases: Annotated[list[TreeCase], Field(min_length=1, max_length=SMALL_LIST_MAX)]
    verdict: FamilyVerdict | None = None  # None: Holm at `alpha`

    @model_validator(mode="after")
    def _method(self):
        _unique(self.cases, "case")
        if self.method == "sampled" and self.seeds is None:
            raise ValueError("a sampled tree protocol needs seeds")
        if self.method == "grid" and self.max_tv is not None:
            raise ValueError("max_tv applies to sampled tree protocols")
        exact = all(s.threshold_single == 1.0 and s.threshold_acc == 1.0 for s in self.settings)
        if self.method == "grid" and not exact:
            raise ValueError("quadrature checks exactness: lossy settings need method sampled")
        return _with_verdict(self)
