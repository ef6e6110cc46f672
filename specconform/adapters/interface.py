"""The typed engine interface: what an adapter must have, and what the runner calls.

Two protocols, both checked by mypy:

- :class:`EngineAdapter` is what an adapter author writes: the members every engine
  must have (``prompt``, ``vocab_size``, ``describe``, ``run_group``, ``target_law``),
  plus optional methods named in :data:`OPTIONAL_METHODS`, each tied to the
  capability it gives (an adapter without ``draft_law`` still runs; the tests that need
  q are "not applicable", never PASS). :func:`check_adapter` checks the required members
  when the adapter is loaded, before any run starts, with one line naming the first
  missing one.
- :class:`Engine` is what the runners call: every method, optional ones included, on
  the validated wrapper (`specconform.adapters.checks.CheckedEngine`), which answers
  None where the adapter lacks the capability. The runner talks only to an ``Engine``;
  no runner calls a method by duck typing.

The vocabulary (SeedRecord, TokenEvent, Capabilities) is in `specconform.adapters.types`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from specconform.adapters.types import AdapterError, AdapterInfo, SeedRecord

if TYPE_CHECKING:
    from specconform.adapters.checks import CheckedEngine
    from specconform.adapters.sequence import RequestSpec, SequenceRecord


@runtime_checkable
class EngineAdapter(Protocol):
    """What a distribution protocol needs from an engine (`specconform.adapters.engine`'s
    docstring and docs/adapters.md say what each member returns)."""

    prompt: list[int]
    vocab_size: int

    def describe(self) -> Mapping:
        """{"name": str, "version": str, "packages": {dist: version},
        "capabilities": {field of `Capabilities`: bool}}"""
        ...

    def run_group(
        self, group, seeds: list[int], progress: Callable[[int, int], None] | None = None
    ) -> list[SeedRecord]:
        """group: the protocol's `Group` (name, mode nospec|sync|async, draft_loops)."""
        ...

    def target_law(self, prefix: Sequence[int]) -> np.ndarray:
        """-> [V] float32/float64, non-negative, sums to 1."""
        ...


# Members every adapter has, in the order they are checked: attributes, then methods.
REQUIRED_ATTRIBUTES = ("prompt", "vocab_size")
REQUIRED_METHODS = ("describe", "run_group", "target_law")
# Optional methods -> what they give (Capabilities field, or the run step that uses them).
OPTIONAL_METHODS: dict[str, str] = {
    "draft_law": "draft_law",
    "target_laws": "batched_target_laws",
    "draft_laws": "batched_draft_laws",
    "check_group": "group checks before any work",
    "close": "releasing the engine after the run",
    "run_requests": "sequence",
    "target_law_for": "sequence",
    "draft_law_for": "sequence (q per request)",
    "sequence_laws": "sequence_laws",
    "target_logits": "logits",
}


def check_adapter(adapter: object, name: str) -> None:
    """At load time: AdapterError (one line, exit 2) naming the first required member
    ``adapter`` lacks, so a half-written adapter fails before any work, not minutes
    into a run when the runner first calls the missing method."""
    for attribute in REQUIRED_ATTRIBUTES:
        if not hasattr(adapter, attribute):
            raise AdapterError(
                f"engine adapter {name}: missing attribute {attribute} "
                f"(an EngineAdapter has {', '.join(REQUIRED_ATTRIBUTES)})"
            )
    for method in REQUIRED_METHODS:
        if not callable(getattr(adapter, method, None)):
            raise AdapterError(
                f"engine adapter {name}: missing method {method}() "
                f"(an EngineAdapter has {', '.join(m + '()' for m in REQUIRED_METHODS)})"
            )


class Engine(Protocol):
    """Every call a runner makes on an engine (the validated wrapper). Optional
    capabilities answer None when the adapter lacks them."""

    name: str
    info: AdapterInfo
    prompt: list[int]
    vocab_size: int

    def check_groups(self, groups: Sequence[Any]) -> None: ...
    def run_group(
        self, group: Any, seeds: list[int], progress: Callable[[int, int], None] | None = None
    ) -> list[SeedRecord]: ...
    def target_law(self, prefix: list[int]) -> np.ndarray: ...
    def draft_law(self, prefix: list[int], depth: int) -> np.ndarray | None: ...
    def target_laws(self, prefixes: list[list[int]]) -> list[np.ndarray]: ...
    def draft_laws(self, prefixes: list[list[int]], depth: int) -> list[np.ndarray] | None: ...
    # The sequence methods (optional on an adapter: adapters.sequence's docstring).
    def run_requests(
        self,
        group: Any,
        requests: list[RequestSpec],
        max_num_seqs: int | None,
        trace: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[SequenceRecord]: ...
    def sequence_laws(  # -> (p [T, V] float32, q [T, V] float32 or None)
        self, request: RequestSpec, tokens: Sequence[int], draft_depth: int | None
    ) -> tuple[np.ndarray, np.ndarray | None] | None: ...
    # -> [V] float32, the serial reference p under the request's parameters
    def target_law_for(self, prefix: Sequence[int], request: RequestSpec) -> np.ndarray: ...
    def draft_law_for(
        self, prefix: Sequence[int], request: RequestSpec, depth: int
    ) -> np.ndarray | None: ...
    def target_logits(self, prefix: Sequence[int]) -> np.ndarray | None: ...
    def round_uniforms(self, request: RequestSpec, round: int, step: int) -> Any: ...
    def close(self) -> None: ...


if TYPE_CHECKING:

    def _checked_engine_is_an_engine(engine: CheckedEngine) -> Engine:
        # mypy proves the validated wrapper gives every call a runner makes.
        return engine
