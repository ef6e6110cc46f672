"""On-disk cache of the reference laws `specconform plan` replays (issue 38, part 4).

Replaying every first token's p and q through the protocol's engine on CPU took 80 s for
fp32_t2 (small preset) on 2 idle cores; the laws depend only on the protocol, the engine's
code and weights and the torch that ran it, so a second plan (and a run's pre-run
feasibility check, which calls the planner) reads them back instead.

Key (:class:`LawKey`): the protocol's hash (before overrides), the engine block as replayed
(device after the CPU fallback; ``batch_size`` left out: it changes no law), the draft
depths, a sha256 over the engine's and adapter's source files (and over a local
checkpoint's file names, sizes and mtimes), the specconform and torch versions. Anything
else that changes a law changes one of those, or the code digest.

Folder: ``$SPECCONFORM_LAW_CACHE`` if set, else ``$XDG_CACHE_HOME/specconform/laws`` (else
``~/.cache/specconform/laws``). One JSON file per key, written to a temporary name and
renamed (a reader never sees half an entry). An entry that does not parse or does not hold
its own key is ignored with one warning line and recomputed; a folder that cannot be
written costs a warning, never the plan. Numpy-free and torch-free.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE_ENV = "SPECCONFORM_LAW_CACHE"
# Built-in adapters: (modules and packages whose sources make the laws, distributions
# that count by their version).
_BUILTIN_CODE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bundled": (("specconform.adapters.bundled", "engine_under_test"), ()),
    "hf": (("specconform.adapters.hf",), ("transformers",)),
}
FORMAT = 1  # bumped when the entry layout changes: older entries are then misses
# Top-level fields every cached reference must have (replay_laws' layout).
REQUIRED = ("vocab_size", "p_t1", "p_t2", "q_t2")


@dataclass(frozen=True)
class LawKey:
    protocol_sha256: str
    engine: str  # canonical JSON of the engine block as replayed
    depths: tuple[int, ...]
    code_sha256: str  # engine + adapter sources (and a checkpoint's listing)
    specconform: str
    torch: str

    def digest(self) -> str:
        return hashlib.sha256(_canonical({"format": FORMAT, **asdict(self)})).hexdigest()

    def to_json(self) -> dict:
        return {**asdict(self), "depths": list(self.depths)}


def law_key(
    protocol_sha256: str, engine: dict, depths: Iterable[int], torch_version: str
) -> LawKey:
    """The key of a protocol's laws. ``engine``: its engine block as replayed (JSON-able
    dict, device after any fallback); ``batch_size`` is dropped (it changes no law)."""
    from specconform import __version__

    engine = {k: v for k, v in engine.items() if k != "batch_size"}
    adapter = str(engine.get("adapter") or "bundled")
    # Whose code makes the laws: a built-in adapter's module (and the bundled engine, all
    # of it; transformers by its version: hashing its thousands of files would cost
    # seconds), or a user's factory package (its top-level package, all of it).
    user_package = adapter.split(":", 1)[0].split(".", 1)[0]
    packages, dists = _BUILTIN_CODE.get(adapter, ((user_package,), ()))
    paths = [
        Path(str(v))
        for v in (engine.get("checkpoint"), *(engine.get("options") or {}).values())
        if isinstance(v, str) and v and Path(v).exists()
    ]
    return LawKey(
        protocol_sha256,
        _canonical(engine).decode(),
        tuple(sorted(int(d) for d in depths)),
        source_digest(packages, paths, dists),
        __version__,
        torch_version,
    )


def cache_dir() -> Path:
    """Where entries live (the folder is created at the first write)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "specconform" / "laws"


def entry_path(key: LawKey) -> Path:
    return cache_dir() / f"{key.digest()}.json"


def load(key: LawKey, warn: Callable[[str], None]) -> dict | None:
    """The cached laws of ``key``, or None (absent; unreadable or corrupted: one ``warn``
    line, and the caller recomputes and overwrites it)."""
    path = entry_path(key)
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_bytes())
        laws = entry["laws"]
        ok = entry.get("key") == key.to_json() and all(f in laws for f in REQUIRED)
    except (OSError, ValueError, TypeError, KeyError):
        ok, laws = False, None
    if not ok:
        warn(f"plan: ignoring a corrupted reference-law cache entry {path}; recomputing")
        return None
    return laws


def store(key: LawKey, laws: dict, warn: Callable[[str], None]) -> Path | None:
    """Write ``laws`` under ``key`` atomically; None (and one warning) when it cannot."""
    path = entry_path(key)
    body = _canonical({"key": key.to_json(), "laws": laws})
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        warn(f"plan: could not cache the reference laws in {path.parent}: {exc.strerror or exc}")
        return None
    return path


def source_digest(
    packages: Iterable[str], paths: Iterable[Path] = (), dists: Iterable[str] = ()
) -> str:
    """sha256 over every .py file of the named packages or modules (found without
    importing them), the names, sizes and mtimes of the files under ``paths`` (a
    checkpoint folder: hashing gigabytes of weights would cost more than the replay it
    saves) and the installed versions of the distributions ``dists``."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    for dist in sorted(set(dists)):
        try:
            h.update(f"{dist}=={version(dist)}\0".encode())
        except PackageNotFoundError:
            h.update(f"{dist} absent\0".encode())
    for name in sorted(set(packages)):
        for root in _package_roots(name):
            for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
                h.update(f"{name}:{f.relative_to(root.parent)}\0".encode())
                h.update(f.read_bytes())
    for top in paths:
        top = Path(top)
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file():
                st = f.stat()
                h.update(f"{f.relative_to(top.parent)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _package_roots(name: str) -> list[Path]:
    """The folder(s) of a package, or the file of a plain module; [] when not found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else []


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
