"""The schema of ``kind: mcnemar`` protocols: paired correctness on GSM8K, exact McNemar.

A McNemar protocol pre-registers the question subset (``dataset.questions`` taken by the
hash ranking of specconform.gsm8k with ``dataset.salt``), the seeds (trial (question i,
seed j) uses seed ``seeds.offset + i * seeds.count + j`` in every group: the groups
answer the same trials, which is what makes the comparison paired), the engine and its
sampling (temperature 0 is greedy), the groups (nospec, sync, async), the pairs to
compare, the deciding metric (lm-eval gsm8k_cot's ``flexible-extract`` or
``strict-match``), the direction of the rule and the family-wise verdict.
specconform/kinds/mcnemar evaluates it; the raw file is described there.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specconform.protocol.schema import (
    EngineErrors,
    FamilyVerdict,
    Probability,
    SeedPlan,
    _with_verdict,
)
from specconform.protocol.schema_base import (
    BATCH_MAX,
    DEPTH_MAX,
    K_MAX,
    LAYER_MAX,
    LIST_MAX,
    SHORT_MAX,
    SMALL_LIST_MAX,
    TEMPERATURE_MAX,
    TOKENS_MAX,
    BaseCandidate,
    DraftLoops,
    Name,
    ProtocolName,
    Seed,
    Strict,
    Text,
    TopK,
    _unique,
    draft_loops_iff_drafting,
    known_sides,
    overridable,
)


class McNemarEngine(Strict):
    """The bundled engine on a packaged real model (or a preset, for tests: its answers
    are noise) generating free text: long generations, greedy or random sampling."""

    adapter: Literal["bundled"] = "bundled"
    model: Literal["smollm2-135m"] | None = None
    preset: Literal["tiny", "small"] | None = None
    model_seed: Seed = 0
    stage_layers: (
        Annotated[list[Annotated[int, Field(ge=1, le=LAYER_MAX)]], Field(max_length=DEPTH_MAX)]
        | None
    ) = None
    draft_head: Literal["plain", "fitted"] = "plain"
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    num_speculative_tokens: Annotated[int, Field(ge=1, le=K_MAX)] = 3
    temperature: Annotated[float, Field(ge=0.0, le=TEMPERATURE_MAX)] = 0.0  # 0: greedy
    top_k: TopK = 0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    max_tokens: Annotated[int, Field(ge=1, le=TOKENS_MAX)] = 256
    batch_size: Annotated[int, Field(ge=1, le=BATCH_MAX)] = Field(
        32, json_schema_extra=overridable("--batch-size")
    )

    @model_validator(mode="after")
    def _one_model(self):
        if (self.model is None) == (self.preset is None):
            raise ValueError("engine: give exactly one of model (a real model) or preset")
        if self.model is None and (self.stage_layers is not None or self.draft_head != "plain"):
            raise ValueError("stage_layers and draft_head apply to a packaged model only")
        return self


class GSM8KSubset(Strict):
    """The first ``questions`` GSM8K test questions by ascending sha256(salt + question).

    ``stop``: the stop sequences that cut each generation before scoring; None: the
    records' own (``Question:``, ``</s>``, ``<|im_end|>``, a blank line)."""

    name: Literal["gsm8k"] = "gsm8k"
    questions: Annotated[int, Field(ge=1, le=1319)]
    salt: Annotated[str, Field(max_length=SHORT_MAX)] = "specconform-gsm8k-v1"
    # 8: the records' 8-shot chain-of-thought context; 0: only its last "Question: ...
    # Answer:" block (short prompts for tests on presets, whose answers are noise).
    shots: Literal[0, 8] = 8
    stop: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=SHORT_MAX)]],
            Field(min_length=1, max_length=SMALL_LIST_MAX),
        ]
        | None
    ) = None


class McNemarGroup(Strict):
    name: Name
    mode: Literal["nospec", "sync", "async"]
    draft_loops: DraftLoops | None = None

    @model_validator(mode="after")
    def _draft_loops(self):
        return draft_loops_iff_drafting(self, "group")


class McNemarPair(BaseCandidate):
    """The candidate's correctness against the base's on the same trials."""


class McNemarProtocol(Strict):
    kind: Literal["mcnemar"]
    name: ProtocolName
    description: Text = ""
    alpha: Probability  # per-test level of the rows that do not decide
    engine: McNemarEngine
    dataset: GSM8KSubset
    seeds: SeedPlan  # seeds per question
    groups: Annotated[list[McNemarGroup], Field(min_length=2, max_length=LIST_MAX)]
    pairs: Annotated[list[McNemarPair], Field(min_length=1, max_length=LIST_MAX)]
    metric: Literal["flexible-extract", "strict-match"] = "flexible-extract"
    # worse: a pair fails when the candidate loses significantly more trials than it
    # wins (one-sided exact p); different: any significant difference fails (two-sided).
    fail_on: Literal["worse", "different"] = "worse"
    decision_roles: Annotated[
        list[Literal["primary", "secondary"]], Field(min_length=1, max_length=SMALL_LIST_MAX)
    ] = ["primary"]
    verdict: FamilyVerdict | None = None
    engine_errors: EngineErrors = EngineErrors()
    power: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.8  # for the detectable drop

    @model_validator(mode="after")
    def _references(self):
        _with_verdict(self)
        _unique(self.groups, "group")
        _unique(self.pairs, "pair")
        names = {g.name for g in self.groups}
        for pair in self.pairs:
            known_sides([pair], names, "pair", "group")
            if pair.base == pair.candidate:
                raise ValueError(f"pair {pair.name!r} compares group {pair.base!r} with itself")
        return self

    def trial_seed(self, question_index: int, replicate: int) -> int:
        return self.seeds.offset + question_index * self.seeds.count + replicate
