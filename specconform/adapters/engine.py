"""The engine adapter interface: how a distribution protocol drives any engine.

Vocabulary (docs/contracts.md): a *round* drafts K tokens and verifies them at full
depth; an *accepted* token is a draft that passed the accept rule; the *correction* is
drawn from max(p - q, 0) at a rejected stop point; the *bonus* is drawn from p when
every draft was accepted; a plain *target* sample is a token drawn from p outside any
round (the prefill's first token, every token of a nospec group). The *committed*
tokens are what the engine returns.

An engine adapter (`EngineAdapter`, typed in `specconform.adapters.interface`; the
required members are checked when it is loaded) does four things:

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

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from specconform.adapters.checks import CheckedEngine

# What adapter authors import from here (docs/adapters.md, examples/my_adapter.py): the
# typed interface (adapters.interface) and the vocabulary of an adapter's answers
# (adapters.types), re-exported. The validator's own names (TOKEN_KINDS, AdapterInfo)
# stay in adapters.types.
from specconform.adapters.interface import Engine, EngineAdapter, check_adapter
from specconform.adapters.types import (
    AdapterError,
    Capabilities,
    SeedRecord,
    TokenEvent,
    TokenKind,
    _timing,
    one_line,
    source_digest,
)
from specconform.adapters.watchdog import timed_call, timeout_message
from specconform.util.errors import UsageError

__all__ = [
    "BUILTIN",
    "AdapterError",
    "Capabilities",
    "Engine",
    "EngineAdapter",
    "SeedRecord",
    "TokenEvent",
    "TokenKind",
    "_timing",
    "check_adapter",
    "load_engine",
    "one_line",
    "resolve_factory",
    "source_digest",
]


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


def load_engine(spec, *, mutant: str | None, log=print) -> Engine:
    """Build the protocol's engine adapter, validated: a `CheckedEngine`.

    spec: the protocol's `EngineSpec`. Factories are called as ``factory(spec,
    mutant=mutant, log=log)``; planted bugs (``--mutant``) belong to the bundled engine,
    so other factories get ``mutant=None`` and a mutant given for them is refused."""
    name = spec.adapter
    if mutant is not None and name != "bundled":
        raise UsageError(
            f"--mutant {mutant}: planted bugs belong to the bundled engine; "
            f"engine.adapter is {name!r} (plant a bug in a wrapper adapter)"
        )
    factory = resolve_factory(name)
    seconds = getattr(spec, "call_timeout_s", None)  # building a model is a call too
    adapter = timed_call(
        factory,
        (spec,),
        kwargs={"mutant": mutant, "log": log},
        seconds=seconds,
        message=timeout_message(f"engine adapter {name}", "factory", seconds),
        failed=lambda exc: AdapterError(f"engine adapter {name}: factory raised {one_line(exc)}"),
    )
    return CheckedEngine(adapter, name, spec)


def __getattr__(attr):  # backwards compatible: BundledEngine moved to adapters.bundled
    if attr == "BundledEngine":
        from specconform.adapters.bundled import BundledEngine

        return BundledEngine
    raise AttributeError(attr)
