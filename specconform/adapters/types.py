"""The engine adapters' vocabulary: what an adapter returns and how it describes itself.

Data only (frozen records, the adapter error, two helpers), imported by every adapter
module and by the interface (`specconform.adapters.interface`); it imports no other
adapter module, so the adapters package has no import cycle. The vocabulary of tokens
(accepted, correction, bonus, target; round; committed) is defined in
`specconform.adapters.engine`'s docstring.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from specconform.util.errors import UsageError

if TYPE_CHECKING:
    from specconform.adapters.provenance import EnginePackage

TokenKind = Literal["accepted", "correction", "bonus", "target"]
TOKEN_KINDS: tuple[str, ...] = ("accepted", "correction", "bonus", "target")


class AdapterError(UsageError):
    """An adapter that cannot be loaded or answers wrongly: one line naming the adapter
    and what is wrong; exit 2 (bad input), nothing written to --out."""


def _timing(line: str) -> None:
    """Wall times go to stderr (with --verbose), next to the progress bars, and never
    into the archive's log.txt: two runs with the same inputs must give byte-identical
    evidence."""
    from specconform.util.progress import timing

    timing(line)


@dataclass(frozen=True)
class TokenEvent:
    """How one committed token came about (when the engine can tell)."""

    round: int  # -1 for a plain target sample outside any round, else 0, 1, ...
    position: int  # draft position within its round (0..K); -1 for a target sample
    kind: TokenKind


@dataclass(frozen=True)
class SeedRecord:
    seed: int
    tokens: tuple[int, ...]  # committed tokens t1, t2, t3, ...
    # Whether t2 was a draft and accepted: 1 accepted, 0 rejected (t2 is the correction),
    # -1 t2 was not drafted (nospec, or a bonus). For the bundled engine t2 is position 0
    # of the round after t1; an engine whose first round starts at the prompt drafts t2
    # at position 1 (after an accepted t1) or 0 of the next round (after a correction t1);
    # either way its rejection probability given t1 is TV(p, q) (the acceptance test).
    first_accepted: int
    rounds: tuple[tuple[int, int], ...]  # per speculative round: (drafted, accepted)
    finish_reason: str
    # One event per committed token, or None when the engine cannot tell.
    events: tuple[TokenEvent, ...] | None = None


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can tell; tests needing a missing one are "not applicable"."""

    draft_law: bool = False  # gives q (acceptance and joint tests need it)
    round_telemetry: bool = False  # fills SeedRecord.rounds / first_accepted
    token_events: bool = False  # fills SeedRecord.events
    black_box: bool = True  # draws its own randomness (seeded per request)
    batched_target_laws: bool = False
    batched_draft_laws: bool = False  # draft_laws(prefixes, depth), checked like target_laws
    # Sequence protocols (specconform.adapters.sequence): run_requests and
    # target_law_for; sequence_laws (teacher forcing); trace (run_requests(trace=True)
    # fills the per-round laws); logits (target_logits, for the oracle check).
    sequence: bool = False
    sequence_laws: bool = False
    trace: bool = False
    logits: bool = False

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AdapterInfo:
    """A validated ``describe()``, plus where the adapter's code came from."""

    name: str
    version: str
    packages: tuple[tuple[str, str], ...]  # (distribution name, version), sorted
    capabilities: Capabilities
    source: str  # "module.Class" of the adapter
    source_sha256: str
    # The engine's package, version and git commit (adapters.provenance.EnginePackage);
    # None for an info built without one.
    engine: EnginePackage | None = None

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "version": self.version,
            "packages": dict(self.packages),
            "capabilities": self.capabilities.to_json(),
            "source": self.source,
            "source_sha256": self.source_sha256,
        }
        if self.engine is not None:
            out["engine"] = self.engine.to_json()
        return out


def source_digest(obj) -> tuple[str, str]:
    """("module.Class", sha256 of the file defining obj's class): the archive names the
    code that produced the evidence, not just a version string (a module name, not a
    path, so that the same code on another machine records the same bytes)."""
    cls = type(obj)
    where = f"{cls.__module__}.{cls.__qualname__}"
    try:
        path = Path(inspect.getfile(cls)).resolve()
        return where, hashlib.sha256(path.read_bytes()).hexdigest()
    except (TypeError, OSError):
        return where, ""


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
