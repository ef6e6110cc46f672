"""The protocol file schema: one pydantic model per protocol kind.

A protocol file is a pre-registration: engine configuration, groups, seed plan, every
test, alpha and the decision rule, fixed before any data exists. Validation is strict
(unknown keys, wrong types and out-of-range values are errors). Fields that the command
line may override carry ``json_schema_extra={"overridable": ...}`` naming the CLI option;
everything else is frozen by the protocol's hash.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, field_validator, model_serializer, model_validator

from specconform.protocol.schema_base import (
    BATCH_MAX,
    CALL_TIMEOUT_DEFAULT_S,
    COUNT_MAX,
    DEPTH_MAX,
    K_MAX,
    LAYER_MAX,
    LIST_MAX,
    MASS_MAX,
    SAMPLES_MAX,
    SCALE_MAX,
    SHORT_MAX,
    SMALL_LIST_MAX,
    TEMPERATURE_MAX,
    VOCAB_MAX,
    CallTimeout,
    DraftLoops,
    EngineAdapter,
    FilePath,
    Name,
    NonNegInt,
    Probability,
    ProtocolName,
    SamplerAdapter,
    Seed,
    Strict,
    Text,
    TokenList,
    TopK,
    _unique,
    omit_unset,
    overridable,
)
from specconform.protocol.schema_equality import (  # re-exported: kinds import them here
    Comparison,
    EqualityConfig,
    EqualityEngine,
    EqualityProtocol,
    PromptPlan,
)
from specconform.protocol.schema_sequential import (
    SequentialPlan,
    check_sequential,
)

__all__ = [
    "Comparison",
    "EqualityConfig",
    "EqualityEngine",
    "EqualityProtocol",
    "NonNegInt",
    "Probability",
    "PromptPlan",
    "Strict",
    "overridable",
]


# --- kernel protocols -------------------------------------------------------------------


class RandomLaw(Strict):
    """A deterministic pseudo-random law: `support` tokens drawn from the vocabulary with
    Dirichlet(`concentration`) masses, all from numpy's PCG64 seeded with `seed`."""

    seed: Seed
    support: Annotated[int, Field(ge=1, le=VOCAB_MAX)]
    concentration: Annotated[float, Field(gt=0.0, le=SCALE_MAX)] = 1.0
    within: Literal["vocab", "p"] = "vocab"  # q's support drawn inside p's support


# An explicit law: one unnormalised mass per token of the vocabulary.
LawSpec = (
    Annotated[list[Annotated[float, Field(ge=0.0, le=MASS_MAX)]], Field(max_length=VOCAB_MAX)]
    | RandomLaw
)


class SamplerSpec(Strict):
    """Which accept kernel to test: the bundled engine's, or a user's factory
    `package.module:callable` returning an object with `accept(...)` (see adapters)."""

    adapter: SamplerAdapter = "bundled"
    # Seconds the factory and each accept() call may take (as engine.call_timeout_s:
    # exit 124 past it; outside protocol.json and the hash).
    call_timeout_s: CallTimeout = CALL_TIMEOUT_DEFAULT_S


class QuadratureCase(Strict):
    name: Name
    vocab: Annotated[int, Field(ge=1, le=VOCAB_MAX)]
    p: LawSpec
    q: LawSpec
    # Target law at the bonus position; omitted: p rolled by one token (a law different
    # from p whenever p is not uniform, so a bonus drawn from the wrong row shows).
    p_bonus: LawSpec | None = None
    grid: Annotated[int, Field(ge=4, le=4096)] = 256

    @model_validator(mode="after")
    def _explicit_lengths(self):
        for field in ("p", "q", "p_bonus"):
            law = getattr(self, field)
            if isinstance(law, list) and len(law) != self.vocab:
                raise ValueError(f"{field} has {len(law)} entries but vocab is {self.vocab}")
            if isinstance(law, list) and sum(law) <= 0:
                raise ValueError(f"{field} has zero total mass")
            if isinstance(law, RandomLaw) and law.support > self.vocab:
                raise ValueError(f"{field}.support {law.support} exceeds vocab {self.vocab}")
        return self


# A kernel protocol (quadrature, Monte Carlo): its cases' names are unique. No fields
# and no docstring, so each subclass's fields, order and JSON schema are its own.
class NamedCases(Strict):
    @field_validator("cases", check_fields=False)
    @classmethod
    def _unique_names(cls, cases):
        return _unique(cases, "case")


class QuadratureProtocol(NamedCases):
    kind: Literal["quadrature"]
    name: ProtocolName
    description: Text = ""
    sampler: SamplerSpec = SamplerSpec()
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    cases: Annotated[list[QuadratureCase], Field(min_length=1, max_length=LIST_MAX)]


class FamilyVerdict(Strict):
    """How the deciding tests combine into the verdict, pre-registered: Holm's step-down
    or Bonferroni over their p-values; ``alpha`` is the verdict's stated false-fail rate.

    ``numerics_reserve`` (issue 32): the part of ``alpha`` the p-value family does not
    spend. The family runs at ``alpha - numerics_reserve``; the reserve pays for what real
    numerics add beside it -- the near-tie limits of a sequence protocol's token
    comparisons (their levels must fit in it) -- and what is left is margin, so that a
    finite number of null runs on the real engine can show the stated rate (a verdict
    whose true rate sits at ``alpha`` never gets a 95 % upper bound at or below it).
    Unset: no reserve, the family at ``alpha``."""

    combine: Literal["holm", "bonferroni"] = "holm"
    alpha: Probability
    numerics_reserve: Probability | None = None
    # How `gate` reads an INCONCLUSIVE verdict (a deciding test without evidence): "fail"
    # (the default: exit 7) or "pass" (exit 0, said in one line). Unset is "fail" and is
    # left out of protocol.json, so protocols written before it keep their hash.
    inconclusive: Literal["fail", "pass"] | None = None

    @model_validator(mode="after")
    def _reserve_inside_alpha(self):
        if self.numerics_reserve is not None and self.numerics_reserve >= self.alpha:
            raise ValueError(
                f"verdict.numerics_reserve {self.numerics_reserve:g} must be below "
                f"verdict.alpha {self.alpha:g} (the p-value family runs at their difference)"
            )
        return self

    @model_serializer(mode="wrap")
    def _canonical(self, handler):
        return omit_unset(handler(self), "inconclusive", "numerics_reserve")


class PowerTarget(Strict):
    """The power the deciding tests are planned to reach at ``seeds.count``: each detects
    a bias of total variation ``tv`` in every deciding stratum (the planner's effect, as
    `specconform plan --tv` states it; acceptance: a rate shift) with probability at least
    ``target``. `run` and `gate` check it before any work (specconform.planning.power).
    A target below one half is no plan (and a power at or below alpha is trivial)."""

    target: Annotated[float, Field(ge=0.5, lt=1.0)]
    tv: Annotated[float, Field(gt=0.0, le=1.0)]


class EngineErrors(Strict):
    """Requests ending in an engine error tolerated per deciding group (default none)."""

    tolerance: NonNegInt = 0


class SeedPlan(Strict):
    count: Annotated[int, Field(ge=1, le=COUNT_MAX)] = Field(
        json_schema_extra=overridable("--seeds")
    )
    offset: Seed = Field(0, json_schema_extra=overridable("--offset"))


class MonteCarloCase(Strict):
    name: Name
    vocab: Annotated[int, Field(ge=2, le=VOCAB_MAX)]
    K: Annotated[int, Field(ge=1, le=K_MAX)]
    # Draft lengths used round-robin over rows (ragged batches); each must be in [0, K].
    draft_lens: Annotated[
        list[Annotated[int, Field(ge=0, le=K_MAX)]], Field(min_length=1, max_length=LIST_MAX)
    ]
    law_seed: Seed
    p_support: Annotated[int, Field(ge=1, le=VOCAB_MAX)]
    q_support: Annotated[int, Field(ge=1, le=VOCAB_MAX)]
    concentration: Annotated[float, Field(gt=0.0, le=SCALE_MAX)] = 1.0

    @model_validator(mode="after")
    def _ranges(self):
        if any(d > self.K for d in self.draft_lens):
            raise ValueError(f"draft_lens must lie in [0, K={self.K}]")
        for field in ("p_support", "q_support"):
            if getattr(self, field) > self.vocab:
                raise ValueError(f"{field} exceeds vocab {self.vocab}")
        return self


class MonteCarloProtocol(NamedCases):
    kind: Literal["montecarlo"]
    name: ProtocolName
    description: Text = ""
    alpha: Probability
    min_expected: Annotated[float, Field(gt=0.0, le=SCALE_MAX)] = 5.0
    # How each test's p-value is computed: "chi2", the χ² approximation (the default, and
    # what archives written before this field used), or "monte_carlo", exact level at
    # any sample size from `mc_replications` multinomial samples (stats/gof_mc.py: the
    # χ² tail is too light on the deep positions' few hundred rows).
    pvalue: Literal["chi2", "monte_carlo"] = "chi2"
    mc_replications: Annotated[int, Field(ge=999, le=1_000_000)] = 19_999
    sampler: SamplerSpec = SamplerSpec()
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    seeds: SeedPlan  # seeds.count rows per case; generator keyed by offset + case index
    cases: Annotated[list[MonteCarloCase], Field(min_length=1, max_length=LIST_MAX)]
    verdict: FamilyVerdict | None = None  # None: Holm at `alpha`

    @model_validator(mode="after")
    def _default_verdict(self):
        return _with_verdict(self)


# --- distribution protocols ---------------------------------------------------------------


class EngineSpec(Strict):
    # Which engine: the bundled one, the Hugging Face transformers adapter, or a user's
    # factory "package.module:callable" (docs/adapters.md). `options` is that adapter's
    # own mapping, validated by the adapter (the bundled engine takes none).
    adapter: EngineAdapter = "bundled"
    # JSON values only (no bytes, dates or sets: the canonical JSON must hold them).
    options: Annotated[
        dict[Annotated[str, Field(max_length=SHORT_MAX)], JsonValue],
        Field(max_length=SMALL_LIST_MAX),
    ] = {}
    # The bundled engine's model: a preset (or a checkpoint); other adapters ignore it.
    preset: Literal["tiny", "small", "ouro-1.4b"] | None = None
    model_seed: Seed = 0
    checkpoint: FilePath | None = None  # local directory in Ouro's layout; None: seeded weights
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    num_speculative_tokens: Annotated[int, Field(ge=1, le=K_MAX)]
    temperature: Annotated[float, Field(gt=0.0, le=TEMPERATURE_MAX)]
    top_k: TopK = 0  # 0: off
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    prompt: TokenList | Literal["default"] = "default"
    max_tokens: Annotated[int, Field(ge=2, le=3)] = 3
    batch_size: Annotated[int, Field(ge=1, le=BATCH_MAX)] = Field(
        1024, json_schema_extra=overridable("--batch-size")
    )
    # A real model shipped by a package (engine_under_test.models_pkg), instead of a
    # preset: its layers cut into stages (cumulative layer ends; draft_loops counts
    # stages) and the draft's exit head ("plain" early exit or "fitted" exit maps).
    model: Literal["smollm2-135m"] | None = None
    stage_layers: (
        Annotated[list[Annotated[int, Field(ge=1, le=LAYER_MAX)]], Field(max_length=DEPTH_MAX)]
        | None
    ) = None
    draft_head: Literal["plain", "fitted"] = "plain"
    # Seconds any one adapter call may take before the run ends with exit 124
    # (adapters.watchdog; --adapter-timeout overrides). An operating limit, not part of
    # the claim: excluded from protocol.json and the hash, so setting it changes no run id.
    call_timeout_s: CallTimeout = CALL_TIMEOUT_DEFAULT_S

    @model_validator(mode="after")
    def _bundled_model(self):
        if self.model is None and (self.stage_layers is not None or self.draft_head != "plain"):
            raise ValueError("stage_layers and draft_head apply to a packaged model only")
        if self.adapter == "bundled" and (self.preset is None) == (self.model is None):
            raise ValueError(
                "the bundled engine needs exactly one of engine.preset or engine.model"
            )
        return self


# A group of the distribution or sequence kind: its `mode` says whether it drafts
# (nospec takes no draft_loops, sync and async need them). No fields and no docstring,
# so the subclasses' fields, order and JSON schema are theirs alone.
class DraftedGroup(Strict):
    @model_validator(mode="after")
    def _draft_loops(self):
        mode, draft_loops = self.mode, self.draft_loops  # type: ignore[attr-defined]
        if mode == "nospec" and draft_loops is not None:
            raise ValueError("nospec groups take no draft_loops")
        if mode != "nospec" and draft_loops is None:
            raise ValueError(f"{mode} groups need draft_loops")
        return self


class Group(DraftedGroup):
    name: Name
    mode: Literal["nospec", "sync", "async"]
    draft_loops: DraftLoops | None = None
    seed_offset: Seed = 0  # added to the run's offset: disjoint ranges per group


class TestSpec(Strict):
    __test__ = False
    name: Name
    type: Literal[
        "t1_gof", "t2_gof", "t2_homogeneity", "t3_gof", "acceptance", "joint", "joint_score"
    ]
    role: Literal["prerequisite", "primary", "secondary", "exploratory", "mechanism"]
    groups: Annotated[list[Name], Field(min_length=1, max_length=LIST_MAX)]
    # A t1_gof over several (seed-sharing) groups: how their p-values combine. Unset is
    # Bonferroni (what every earlier file meant; left out of protocol.json, so their
    # hashes stay); "simes" wastes no level on identical draws (stats.aggregate.simes).
    combine: Literal["bonferroni", "simes"] | None = None

    @model_serializer(mode="wrap")
    def _canonical(self, handler):
        return omit_unset(handler(self), "combine")

    @model_validator(mode="after")
    def _combine_t1_only(self):
        if self.combine is not None and self.type != "t1_gof":
            raise ValueError(f"test {self.name!r}: combine applies to t1_gof tests only")
        return self


class Strata(Strict):
    min_samples: Annotated[int, Field(ge=1, le=SAMPLES_MAX)] = 200
    min_expected: Annotated[float, Field(gt=0.0, le=SCALE_MAX)] = 5.0


class Expansion(Strict):
    """Declares this run an expansion of an earlier one: its seed ranges may include the
    earlier run's ranges (same offset, more seeds) instead of being refused as overlap."""

    of_offset: Seed
    of_count: Annotated[int, Field(ge=1, le=COUNT_MAX)]


# Its head fields (kind, name, description, alpha, engine, seeds, groups) read like
# SequenceProtocol's on purpose: each protocol kind declares its whole file format, in
# the order its documentation and JSON schema list the keys.
class DistributionProtocol(Strict):
    kind: Literal["distribution"]
    name: ProtocolName
    description: Text = ""
    alpha: Probability
    engine: EngineSpec
    seeds: SeedPlan
    groups: Annotated[list[Group], Field(min_length=1, max_length=LIST_MAX)]
    strata: Strata = Strata()
    tests: Annotated[list[TestSpec], Field(min_length=1, max_length=LIST_MAX)]
    # The roles whose tests decide the verdict (PASS iff all of them pass at alpha).
    decision_roles: Annotated[
        list[Literal["prerequisite", "primary", "secondary", "mechanism"]],
        Field(min_length=1, max_length=SMALL_LIST_MAX),
    ] = ["prerequisite", "primary"]
    expansion: Expansion | None = None
    # The family-wise rule over the deciding tests; None: Holm at `alpha`. `alpha` above
    # stays the per-test level of the rows that do not decide.
    verdict: FamilyVerdict | None = None
    # The power the seeds must give every deciding test, checked before a run
    # (planning.power); None: not stated, left out of protocol.json and the hash.
    power: PowerTarget | None = None
    engine_errors: EngineErrors = EngineErrors()
    # The anytime-valid mode (schema_sequential); None: fixed-N, left out of the hash.
    sequential: SequentialPlan | None = Field(None, json_schema_extra=overridable("--sequential"))

    @model_serializer(mode="wrap")
    def _canonical(self, handler):
        return omit_unset(handler(self), "sequential", "power")

    @model_validator(mode="after")
    def _references(self):
        _with_verdict(self)
        check_sequential(self.sequential, self.seeds.count, [t.name for t in self.tests])
        _unique(self.groups, "group")
        _unique(self.tests, "test")
        by_name = {g.name: g for g in self.groups}
        arity = {"t1_gof": None, "t2_homogeneity": 2}
        for test in self.tests:
            for g in test.groups:
                if g not in by_name:
                    raise ValueError(f"test {test.name!r} names unknown group {g!r}")
            want = arity.get(test.type, 1)
            if want is not None and len(test.groups) != want:
                raise ValueError(f"test {test.name!r} of type {test.type} takes {want} group(s)")
            if (
                test.type in ("acceptance", "joint", "joint_score")
                and by_name[test.groups[0]].mode == "nospec"
            ):
                raise ValueError(f"test {test.name!r}: {test.type} needs a speculative group")
        return self


def _with_verdict(model):
    """Fill the default family rule (Holm at the protocol's alpha) so that the stored
    protocol always states its rule (and archives of this schema are told apart)."""
    if model.verdict is None:
        object.__setattr__(model, "verdict", FamilyVerdict(combine="holm", alpha=model.alpha))
    return model
