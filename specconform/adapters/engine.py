"""The engine adapter interface: how a distribution protocol drives any engine.

Vocabulary (docs/contracts.md): a *round* drafts K tokens and verifies them at full
depth; an *accepted* token is a draft that passed the accept rule; the *correction* is
drawn from max(p - q, 0) at a rejected stop point; the *bonus* is drawn from p when
every draft was accepted; a plain *target* sample is a token drawn from p outside any
round (the prefill's first token, every token of a nospec group). The *committed*
tokens are what the engine returns.

An engine adapter (`EngineAdapter`) does four things:

- ``describe()``: name, version, the versions of the packages it depends on and its
  capabilities (what it can tell: q, per-round telemetry, whether it draws its own
  randomness); the run records it in ``run.json`` with the sha256 of the adapter's source;
- ``run_group(group, seeds, progress)``: generate from the prompt once per seed under
  one group configuration, returning one `SeedRecord` per seed, in seed order;
- ``target_law(prefix)``: the serial reference p for one prefix, in the engine's own
  sampling semantics (temperature, top-k, top-p), a dense numpy vector over the vocabulary;
- optional ``draft_law(prefix, draft_depth)``: the draft law q of a group's draft depth;
  without it the tests that need q are not applicable;
- optional ``target_laws(prefixes)`` and ``draft_laws(prefixes, draft_depth)``: the same
  laws for many prefixes at once (speed); the runner checks them against ``target_law``
  and ``draft_law`` before trusting them.
- optional ``check_group(group)``: raise `UsageError` for a group the engine cannot
  run (called for every group before anything is written).

It also exposes ``prompt`` (list of token ids) and ``vocab_size``. `load_engine` resolves
a protocol's ``engine.adapter`` (``bundled``, ``hf`` or ``package.module:factory``) and
wraps the adapter in `specconform.adapters.checks.CheckedEngine`, which validates every
answer (shapes, dtypes, token ranges, telemetry consistency) and turns a broken adapter
into one `AdapterError` line (exit 2). docs/adapters.md is the user's guide.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from specconform.errors import UsageError

TokenKind = Literal["accepted", "correction", "bonus", "target"]
TOKEN_KINDS: tuple[str, ...] = ("accepted", "correction", "bonus", "target")


class AdapterError(UsageError):
    """An adapter that cannot be loaded or answers wrongly: one line naming the adapter
    and what is wrong; exit 2 (bad input), nothing written to --out."""


def _timing(line: str) -> None:
    """Wall times go to stderr (with --verbose), next to the progress bars, and never
    into the archive's log.txt: two runs with the same inputs must give byte-identical
    evidence."""
    from specconform.progress import timing

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

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "packages": dict(self.packages),
            "capabilities": self.capabilities.to_json(),
            "source": self.source,
            "source_sha256": self.source_sha256,
        }


@runtime_checkable
class EngineAdapter(Protocol):
    """What a distribution protocol needs from an engine (see the module docstring)."""

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

    def close(self) -> None: ...


# Adapters a protocol may name by a short word: module:factory.
BUILTIN = {
    "bundled": "specconform.adapters.bundled:factory",
    "hf": "specconform.adapters.hf:factory",
}


def resolve_factory(adapter: str, field: str = "engine.adapter") -> Callable:
    target = BUILTIN.get(adapter, adapter)
    # Like `python -m`: a module in the current directory is found even when specconform
    # runs as an installed console script.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise AdapterError(
            f"{field} {adapter!r}: expected {' | '.join(BUILTIN)} or 'package.module:factory'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = " (pip install 'specconform[hf]')" if adapter == "hf" else ""
        raise AdapterError(
            f"{field} {adapter!r}: cannot import {module_name}: {exc}{hint}"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AdapterError(f"{field} {adapter!r}: {module_name} has no callable {attr!r}")
    return factory


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


def load_engine(spec, *, mutant: str | None, log=print):
    """Build the protocol's engine adapter, validated: a `CheckedEngine`.

    spec: the protocol's `EngineSpec`. Factories are called as ``factory(spec,
    mutant=mutant, log=log)``; planted bugs (``--mutant``) belong to the bundled engine,
    so other factories get ``mutant=None`` and a mutant given for them is refused."""
    from specconform.adapters.checks import CheckedEngine

    name = spec.adapter
    if mutant is not None and name != "bundled":
        raise UsageError(
            f"--mutant {mutant}: planted bugs belong to the bundled engine; "
            f"engine.adapter is {name!r} (plant a bug in a wrapper adapter)"
        )
    factory = resolve_factory(name)
    try:
        adapter = factory(spec, mutant=mutant, log=log)
    except UsageError:
        raise
    except Exception as exc:  # a user's factory: any failure is that adapter's
        raise AdapterError(f"engine adapter {name}: factory raised {one_line(exc)}") from None
    return CheckedEngine(adapter, name, spec)


def __getattr__(attr):  # backwards compatible: BundledEngine moved to adapters.bundled
    if attr == "BundledEngine":
        from specconform.adapters.bundled import BundledEngine

        return BundledEngine
    raise AttributeError(attr)
