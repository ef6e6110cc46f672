"""Which engine a run drove: its package name, version and git commit (issue 36).

specconform records its own code in environment.json (version, the commit and dirty
flag of its checkout, a digest of its files). A run against a user's engine records the
engine's beside it, in run.json ``engine_adapter.engine``:

- ``package``: the top-level package of the engine. An adapter names it in
  ``describe()["engine_package"]`` (the bundled adapter: ``engine_under_test``; an HF
  adapter: ``transformers``); otherwise it is the package of the adapter's own class
  (a user's ``my_engine.adapter:factory`` -> ``my_engine``);
- ``version``: the installed distribution's version providing that package
  (importlib.metadata), else the package's ``__version__``, else None;
- ``commit`` / ``dirty``: the git checkout the package was loaded from, when it is a
  tracked file of one (an editable install, a source tree); None for a wheel.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnginePackage:
    package: str
    version: str | None
    commit: str | None
    dirty: bool | None

    def to_json(self) -> dict:
        return asdict(self)


def engine_package(adapter: object, described: Mapping) -> EnginePackage:
    """The engine behind ``adapter`` (its ``describe()`` result is ``described``)."""
    from specconform.evidence.manifest import git_state

    named = described.get("engine_package")
    top = named if isinstance(named, str) and named else type(adapter).__module__.split(".")[0]
    folder = _package_dir(top)
    git = git_state(folder) if folder is not None else {"commit": None, "dirty": None}
    return EnginePackage(top, _version(top), git["commit"], git["dirty"])


def _package_dir(top: str) -> Path | None:
    try:
        module = importlib.import_module(top)
    except Exception:  # noqa: BLE001 (a name that does not import: no checkout to read)
        return None
    where = getattr(module, "__file__", None)
    return Path(where).resolve().parent if where else None


def _version(top: str) -> str | None:
    for dist in md.packages_distributions().get(top, []):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    try:
        version = getattr(importlib.import_module(top), "__version__", None)
    except Exception:  # noqa: BLE001
        return None
    return str(version) if version is not None else None
