"""The schema of ``kind: performance`` protocols: the no-regression A/B.

Two sides, *base* (A) and *candidate* (B), each run in several worker processes in ABBA
order (A B B A A B ...), so that drift (clocks, caches, thermal state, other tenants)
hits both sides alike. Each process warms up, then times every cell (concurrency x
sampling) ``timed_runs`` times. The unit of replication is the process: each side's
committed tokens/s per cell is reported as mean ± SD [min, max] over its processes.

What differs between the sides:

- without ``base_ref``: the *configuration* (``base`` and ``candidate`` of this tree,
  e.g. nospec vs async, or greedy vs random through two protocols);
- with ``base_ref`` (``--base-ref REF``): the *code*. Both sides run the candidate's
  configuration, the base in a snapshot of commit REF (the equality kind's machinery).

The criterion is pre-registered (``criterion``) and decided by the torch-free evaluator
from the raw per-process measurements; ``verify`` recomputes it. Profiler attribution
(``profile``) runs in a separate process per side after the timed ones, so the
profiler's overhead never reaches a timed number.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specconform.protocol.schema_base import (
    CONCURRENCY_MAX,
    K_MAX,
    SMALL_LIST_MAX,
    TOKENS_MAX,
    DraftLoops,
    GitRef,
    ProtocolName,
    Seed,
    Strict,
    Text,
    overridable,
)
from specconform.protocol.schema_equality import check_git_ref


class PerformanceEngine(Strict):
    """The model both sides run (the same preset in each tree)."""

    preset: Literal["tiny", "small", "ouro-1.4b"]
    model_seed: Seed = 0
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=overridable("--device"))
    dtype: Literal["float32", "bfloat16"] = "float32"
    num_speculative_tokens: Annotated[int, Field(ge=1, le=K_MAX)] = 3
    cuda_graphs: bool = True  # timed runs; the profile window always runs eagerly


class SideConfig(Strict):
    """One side's decoding configuration."""

    mode: Literal["nospec", "sync", "async"]
    draft_loops: DraftLoops | None = None

    @model_validator(mode="after")
    def _draft_loops(self):
        if (self.mode == "nospec") != (self.draft_loops is None):
            raise ValueError("draft_loops is required for sync/async and not allowed for nospec")
        return self


class Criterion(Strict):
    """The pre-registered no-regression rule, per cell (concurrency x sampling), on
    committed tokens/s:

    - ``mean_within``: candidate mean >= (1 - max_slowdown) x base mean;
    - ``ranges_overlap``: candidate max >= base min (the [min, max] ranges overlap or
      the candidate is above);
    - ``either``: one of the two holds.
    """

    rule: Literal["mean_within", "ranges_overlap", "either"] = "mean_within"
    max_slowdown: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    # Cells whose rows decide the verdict; the others are reported (role secondary).
    deciding_concurrency: (
        Annotated[
            list[Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)]],
            Field(max_length=SMALL_LIST_MAX),
        ]
        | None
    ) = None


class ProfileSpec(Strict):
    """torch.profiler over a fixed window of engine steps, one request per slot."""

    concurrency: Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)] = 1
    sampling: Literal["greedy", "random"] = "greedy"
    warmup_steps: Annotated[int, Field(ge=0, le=1000)] = 2
    steps: Annotated[int, Field(ge=1, le=1000)] = 8
    top: Annotated[int, Field(ge=1, le=100)] = 10  # source locations listed per side


class PerformanceProtocol(Strict):
    kind: Literal["performance"]
    name: ProtocolName
    description: Text = ""
    engine: PerformanceEngine
    base: SideConfig
    candidate: SideConfig
    base_ref: GitRef | None = Field(None, json_schema_extra=overridable("--base-ref"))
    processes: Annotated[int, Field(ge=2, le=64)] = 4  # per side: SD needs two
    warmup_runs: Annotated[int, Field(ge=1, le=100)] = 1
    timed_runs: Annotated[int, Field(ge=1, le=100)] = 3
    concurrency: Annotated[
        list[Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)]],
        Field(min_length=1, max_length=SMALL_LIST_MAX),
    ]
    sampling: Annotated[list[Literal["greedy", "random"]], Field(min_length=1, max_length=2)] = [
        "greedy",
        "random",
    ]
    max_tokens: Annotated[int, Field(ge=2, le=TOKENS_MAX)] = 64
    prompt_length: Annotated[int, Field(ge=1, le=TOKENS_MAX)] = 16
    prompt_seed: Seed = 0
    criterion: Criterion = Criterion()
    profile: ProfileSpec | None = ProfileSpec()

    @model_validator(mode="after")
    def _checks(self):
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError("concurrency lists a value twice")
        if len(set(self.sampling)) != len(self.sampling):
            raise ValueError("sampling lists a kind twice")
        wanted = self.criterion.deciding_concurrency
        if wanted is not None and not set(wanted) <= set(self.concurrency):
            raise ValueError(
                f"criterion.deciding_concurrency {wanted} is not a subset of concurrency"
            )
        check_git_ref(self.base_ref)
        if self.base_ref is None and self.base == self.candidate:
            raise ValueError(
                "base and candidate are the same configuration: give --base-ref to compare "
                "code, or two configurations to compare within one tree"
            )
        return self
