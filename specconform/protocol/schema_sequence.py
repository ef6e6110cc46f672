"""The schema of ``kind: sequence`` protocols: every committed token of long generations.

A sequence protocol pre-registers groups of requests (mode, draft depth, batching, a
cycle of per-request sampling parameters, staggered lengths), the seed used to draw the
randomisation V_t of the probability integral transform, the strata rules, every test
and the family-wise rule. ``specconform/kinds/sequence`` evaluates it; the raw files its
runner writes are described in :mod:`specconform.kinds.sequence.raw`.

Test types:

- stochastic (a p-value, exact or asymptotic, size stated in docs/calibration.md):
  ``pit_uniformity`` (U_t ~ Uniform(0, 1) per stratum of what is known before the token
  is drawn), ``pit_independence`` (pairs of U's: ``pairs: lag1 | rounds | requests |
  request_rounds``), ``pit_correlation`` (the same pairs, z of their centred products),
  ``acceptance_all`` (rejections at every drafted position against sum TV(p_j, q_j)),
  ``mechanism_pit`` (the PIT of each correction under (p_j - q_j)+ / TV and of each
  accepted draft under min(p_j, q_j) / (1 - TV), per law, draft position and round
  band: ``law: correction | accepted | both``), ``accept_after_bonus`` (the next
  round's first accept decision after a bonus against 1 − TV, weighted by the bonus's
  mid-PIT: kinds/sequence/bonus_accept.py);
- deterministic (no sample size; a correct engine never breaks them): ``oracle`` (the
  reference law against the independent numpy oracle of the sampling semantics),
  ``teacher_forcing`` (batched teacher-forced laws against the incremental serial
  replay), ``trace`` (the laws the engine used in each round against the serial replay),
  ``isolation`` (a request's tokens equal its solo run with the same seed),
  ``stops`` (every request ends at its first stop token or at max_tokens, nothing
  committed after a stop: runner/sequence_stops.py),
  ``streams`` (no two random draws of the traced requests share a generator key and
  counter: runner/sequence_streams.py),
  ``greedy_equality`` (a greedy speculative group token for token against a greedy
  nospec group).

Numerics (issue 32; docs/contracts.md "Numerics model"): a protocol may state the
numerics model of its engine in a ``numerics`` block (`NumericsSpec`). Then a law
comparison may say ``tolerance: model`` (its tolerance is the model's law bound at the
smallest temperature of the groups it covers, recomputed by ``verify``), and the token
comparisons (``isolation``, ``greedy_equality``) count a mismatch whose deciding
uniform or logit gap lies within the model's error as a near-tie, not a mismatch, and
fail when near-ties exceed the model's bound at ``numerics.alpha``.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, model_serializer, model_validator

from specconform.protocol.schema import (
    DraftedGroup,
    EngineErrors,
    EngineSpec,
    FamilyVerdict,
    Probability,
    SeedPlan,
    Strict,
    _unique,
    _with_verdict,
)
from specconform.protocol.schema_base import (
    CONCURRENCY_MAX,
    COUNT_MAX,
    K_MAX,
    LIST_MAX,
    SAMPLES_MAX,
    SMALL_LIST_MAX,
    TEMPERATURE_MAX,
    TOKENS_MAX,
    TOLERANCE_MAX,
    DraftLoops,
    Name,
    ProtocolName,
    Seed,
    Text,
    TokenId,
    TokenList,
    TopK,
    omit_unset,
)


class NumericsSpec(Strict):
    """The stated numerics model of the engine (specconform.stats.numerics.NumericsModel):
    a logit is the end of ``kernels`` reductions of ``reduction_length`` terms in
    ``dtype``; ``logit_scale`` bounds |logit| at temperature 1 (the model's scale is
    logit_scale / T). ``boundaries``: the CDF boundaries one decision's uniform can fall
    near (the support of the laws: the largest top-k, or a bound on the vocabulary that
    carries mass), which sets the near-tie rate; ``alpha``: the level at which a near-tie
    count refutes the model (stochastic, so it is stated like any level)."""

    dtype: Literal["float64", "float32", "float16", "bfloat16"]
    reduction_length: Annotated[int, Field(ge=1, le=COUNT_MAX)]
    kernels: Annotated[int, Field(ge=1, le=COUNT_MAX)]
    logit_scale: Annotated[float, Field(gt=0.0, le=1e6)]
    growth: Literal["random", "worst"] = "random"
    boundaries: Annotated[int, Field(ge=1, le=COUNT_MAX)]
    alpha: Probability


class SequenceEngine(EngineSpec):
    """The engine of a sequence protocol: as a distribution protocol's, but generations
    are long (``max_tokens`` up to 4,096, the default of requests that do not set one)
    and temperature 0 (greedy) is allowed for the engine-wide default."""

    temperature: Annotated[float, Field(ge=0.0, le=TEMPERATURE_MAX)] = 1.0
    num_speculative_tokens: Annotated[int, Field(ge=1, le=K_MAX)] = 3
    max_tokens: Annotated[int, Field(ge=1, le=TOKENS_MAX)] = 256


class SamplingConfig(Strict):
    """One request's sampling parameters; unset fields take the engine's."""

    temperature: Annotated[float, Field(ge=0.0, le=TEMPERATURE_MAX)] | None = None  # 0: greedy
    top_k: TopK | None = None  # 0: off
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None


class SequenceGroup(DraftedGroup):
    """One engine configuration and its requests.

    Request i (0-based) of the group uses prompt ``prompts[i % len(prompts)]``,
    sampling ``sampling[i % len(sampling)]``, length ``max_tokens[i % len(max_tokens)]``
    and seed ``seeds.offset + seed_offset + i`` (greedy requests take no seed). All
    requests go to the engine in one call with at most ``max_num_seqs`` running at once:
    fewer slots than requests is continuous batching (later requests are admitted while
    earlier ones decode)."""

    name: Name
    mode: Literal["nospec", "sync", "async"]
    draft_loops: DraftLoops | None = None
    requests: Annotated[int, Field(ge=1, le=COUNT_MAX)] | None = None  # None: seeds.count
    seed_offset: Seed = 0
    max_num_seqs: Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)] | None = None  # None: all
    # indices into the protocol's prompts
    prompts: Annotated[
        list[Annotated[int, Field(ge=0, lt=LIST_MAX)]], Field(min_length=1, max_length=LIST_MAX)
    ] = [0]
    sampling: Annotated[list[SamplingConfig], Field(min_length=1, max_length=LIST_MAX)] = [
        SamplingConfig()
    ]
    max_tokens: (
        Annotated[
            list[Annotated[int, Field(ge=1, le=TOKENS_MAX)]],
            Field(min_length=1, max_length=LIST_MAX),
        ]
        | None
    ) = None  # None: [engine.max_tokens]
    stop_token_ids: Annotated[list[TokenId], Field(max_length=SMALL_LIST_MAX)] = []
    ignore_eos: bool = True


StochasticType = Literal[
    "pit_uniformity",
    "pit_independence",
    "pit_correlation",
    "acceptance_all",
    "mechanism_pit",
    "mechanism_mean",
    "crossing_count",
    "accept_after_bonus",
]
DeterministicType = Literal[
    "oracle", "teacher_forcing", "trace", "isolation", "greedy_equality", "stops", "streams"
]
STOCHASTIC_TYPES: tuple[str, ...] = get_args(StochasticType)
LAW_TYPES = ("oracle", "teacher_forcing", "trace")  # deterministic law comparisons
# Token comparisons that count near-ties under a numerics model, each with a limit at
# numerics.alpha (kinds/sequence/numerics.py): stochastic, so their levels are charged
# to the verdict's numerics reserve.
TOKEN_TYPES = ("isolation", "greedy_equality")


def limits_near_ties(test_type: str, tolerance: object) -> bool:
    """Whether a deterministic test counts near-ties under a numerics model, with a
    limit at numerics.alpha charged to the reserve: the token comparisons, and the law
    comparisons held to the model (``tolerance: model``), whose supports may differ at
    a top-k/top-p threshold inside the error (runner/filter_ties.py)."""
    return test_type in TOKEN_TYPES or (test_type in LAW_TYPES and tolerance == "model")


DETERMINISTIC_TYPES: tuple[str, ...] = get_args(DeterministicType)


class SequenceTest(Strict):
    __test__ = False
    name: Name
    type: StochasticType | DeterministicType
    role: Literal["primary", "secondary", "exploratory", "mechanism", "conformance"]
    groups: Annotated[list[Name], Field(max_length=LIST_MAX)] = []  # none: every group
    # pit_independence, pit_correlation: which pairs of U's (lag1: consecutive tokens
    # of one request; rounds: the same draft position in consecutive rounds of one
    # request; requests: the same step of requests 2i and 2i+1 of one group;
    # request_rounds: the same round and draft position of requests 2i and 2i+1).
    pairs: Literal["lag1", "rounds", "requests", "request_rounds"] | None = None
    # mechanism_pit: which conditional law(s) (None: both); its own strata sizes (None:
    # the protocol's strata.bins / strata.min_samples; round bands always the protocol's).
    # mechanism_mean: law (None: correction) and min_samples per group (no bins).
    law: Literal["correction", "accepted", "both"] | None = None
    bins: Annotated[int, Field(ge=2, le=100)] | None = None
    min_samples: Annotated[int, Field(ge=1, le=SAMPLES_MAX)] | None = None
    # greedy_equality: the greedy nospec group the speculative groups are compared with.
    against: Name | None = None
    # Deterministic checks: max |Δp| allowed (oracle, teacher_forcing, trace); "model":
    # the law bound of the protocol's numerics block (kinds/sequence/numerics.py).
    tolerance: Annotated[float, Field(ge=0.0, le=TOLERANCE_MAX)] | Literal["model"] | None = None
    # How many requests (trace, isolation) or prefixes (oracle, teacher_forcing) the
    # check covers; None: the type's default (docs/sequence.md).
    sample: Annotated[int, Field(ge=1, le=COUNT_MAX)] | None = None
    # crossing_count: only tokens at a round position >= min_position (1: past the first
    # draft position, which the distribution kind's first-position tests already cover;
    # None: every token). Left out of the canonical JSON when None, so adding the field
    # changed no existing protocol's hash.
    min_position: Annotated[int, Field(ge=0, le=K_MAX)] | None = None  # positions 0..K

    @model_serializer(mode="wrap")
    def _canonical(self, handler):
        return omit_unset(handler(self), "min_position")


class SequenceStrata(Strict):
    """Strata of pit_uniformity: by the token's slot (plain target sample, draft position
    j, bonus) and by round band (round index in [b_i, b_{i+1})); strata with fewer than
    ``min_samples`` tokens are pooled into their slot's last band."""

    # round indices: a request has at most TOKENS_MAX rounds
    round_bands: Annotated[
        list[Annotated[int, Field(ge=0, le=TOKENS_MAX)]],
        Field(min_length=1, max_length=SMALL_LIST_MAX),
    ] = [0, 1, 4, 16]
    min_samples: Annotated[int, Field(ge=1, le=SAMPLES_MAX)] = 50
    bins: Annotated[int, Field(ge=2, le=100)] = 10  # equiprobable bins of U per stratum


class SequenceProtocol(Strict):
    kind: Literal["sequence"]
    name: ProtocolName
    description: Text = ""
    alpha: Probability  # per-test level of rows that do not decide
    engine: SequenceEngine
    # Prompts referenced by index from the groups: token lists, or "default" (the
    # engine's default prompt).
    prompts: Annotated[
        list[TokenList | Literal["default"]], Field(min_length=1, max_length=LIST_MAX)
    ] = ["default"]
    seeds: SeedPlan
    pit_seed: Seed = 0  # seeds specconform's own generator of the V_t
    groups: Annotated[list[SequenceGroup], Field(min_length=1, max_length=LIST_MAX)]
    strata: SequenceStrata = SequenceStrata()
    tests: Annotated[list[SequenceTest], Field(min_length=1, max_length=LIST_MAX)]
    decision_roles: Annotated[
        list[Literal["primary", "secondary", "mechanism", "conformance"]],
        Field(min_length=1, max_length=SMALL_LIST_MAX),
    ] = ["primary", "mechanism", "conformance"]
    verdict: FamilyVerdict | None = None
    engine_errors: EngineErrors = EngineErrors()
    # The engine's numerics model (issue 32); None: exact comparisons, as before it
    # existed. Left out of the canonical JSON when None (no existing hash changed).
    numerics: NumericsSpec | None = None

    @model_serializer(mode="wrap")
    def _canonical(self, handler):
        return omit_unset(handler(self), "numerics")

    @model_validator(mode="after")
    def _references(self):
        _with_verdict(self)
        _unique(self.groups, "group")
        _unique(self.tests, "test")
        by_name = {g.name: g for g in self.groups}
        for group in self.groups:
            for index in group.prompts:
                if index >= len(self.prompts):
                    raise ValueError(
                        f"group {group.name!r}: prompt index {index} but the protocol "
                        f"has {len(self.prompts)} prompt(s)"
                    )
        for test in self.tests:
            for g in [*test.groups, *([test.against] if test.against else [])]:
                if g not in by_name:
                    raise ValueError(f"test {test.name!r} names unknown group {g!r}")
            paired = ("pit_independence", "pit_correlation")
            if test.type in paired and test.pairs is None:
                raise ValueError(f"test {test.name!r}: {test.type} needs pairs")
            if test.type not in paired and test.pairs is not None:
                raise ValueError(
                    f"test {test.name!r}: pairs applies to pit_independence and "
                    "pit_correlation only"
                )
            if test.type == "greedy_equality":
                if test.against is None:
                    raise ValueError(f"test {test.name!r}: greedy_equality needs against")
                if by_name[test.against].mode != "nospec":
                    raise ValueError(f"test {test.name!r}: against must name a nospec group")
            elif test.against is not None:
                raise ValueError(f"test {test.name!r}: against applies to greedy_equality only")
            mechanism = ("mechanism_pit", "mechanism_mean")
            if test.type not in mechanism and (
                test.law is not None or test.bins is not None or test.min_samples is not None
            ):
                raise ValueError(
                    f"test {test.name!r}: law, bins and min_samples apply to "
                    "mechanism_pit and mechanism_mean only"
                )
            if test.type != "crossing_count" and test.min_position is not None:
                raise ValueError(f"test {test.name!r}: min_position applies to crossing_count only")
            if test.tolerance == "model":
                if test.type not in LAW_TYPES:
                    raise ValueError(
                        f"test {test.name!r}: tolerance: model applies to "
                        f"{', '.join(LAW_TYPES)} only"
                    )
                if self.numerics is None:
                    raise ValueError(
                        f"test {test.name!r}: tolerance: model needs the protocol's numerics block"
                    )
            if test.type == "mechanism_mean" and test.bins is not None:
                raise ValueError(f"test {test.name!r}: mechanism_mean has no bins")
            if test.type in (
                "acceptance_all",
                "trace",
                "streams",
                "accept_after_bonus",
                *mechanism,
            ):
                for g in test.groups:
                    if by_name[g].mode == "nospec":
                        raise ValueError(
                            f"test {test.name!r}: {test.type} needs speculative groups"
                        )
        self._near_tie_levels_inside_reserve()
        return self

    def _near_tie_levels_inside_reserve(self) -> None:
        """The near-tie limits are stochastic checks (a correct engine exceeds one with
        chance at most numerics.alpha): the verdict states its false-fail rate only if
        their levels fit in its numerics reserve (issue 32)."""
        if self.numerics is None:
            return
        roles = set(self.decision_roles)
        limited = [
            t.name for t in self.tests if limits_near_ties(t.type, t.tolerance) and t.role in roles
        ]
        # Every sequence evaluation adds out_of_support, which under a numerics block
        # counts filter near-ties within a limit of its own (kinds/sequence/checks.py).
        limited.append("out_of_support")
        verdict = self.verdict  # _with_verdict has set it; None only before validation
        reserve = (verdict.numerics_reserve or 0.0) if verdict is not None else 0.0
        spent = self.numerics.alpha * len(limited)
        if limited and spent > reserve * (1 + 1e-9):
            raise ValueError(
                f"numerics.alpha {self.numerics.alpha:g} x {len(limited)} near-tie limit(s) "
                f"({', '.join(limited)}) = {spent:g} exceeds verdict.numerics_reserve "
                f"{reserve:g}: the limits' levels must fit inside the verdict's alpha"
            )

    def group_requests(self, group: SequenceGroup) -> int:
        return group.requests if group.requests is not None else self.seeds.count
