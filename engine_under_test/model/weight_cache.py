"""Seeded weights memoised on disk: the same tensors, without recomputing them.

``init_weights`` computes every weight on the CPU from the seed (a QR of D x D, products
of V x D, one generator in a fixed order) so that CPU and CUDA get the same fp32 values.
For the ``small`` preset that is about 5 s of every process on a 2-core CPU (an entry
loads in 1.25 s there; on an H200 box ``build_model`` took 4.26 s in a fresh process,
bench/cold_start.py, but the cached load's gain was within the engine load's noise,
docs/gpu-runs.md session 7), for the same 195 M numbers. When ``ENGINE_UNDER_TEST_WEIGHT_CACHE`` names a folder (``specconform run``
sets it to ``<out>/.cache/weights``, beside the Triton cache; runner/caches.py), the
first build of a configuration writes its state dict there and later builds load it.

What makes an entry the same weights:

- its key hashes everything that decides them: the whole ``ModelConfig`` (seed, sizes,
  init constants), the dtype, the torch version (the CPU generator's stream) and the
  source of the modules that define the parameters and their values (this package's
  ``init.py``, ``model.py``, ``decoder.py`` and ``layers.py``, and ``config.py``), so an
  edit of the initialisation can never load weights of the old code;
- the file's digest is stored beside it and checked before loading; an entry that does
  not match (a torn write, a corrupted disk) is rebuilt and replaced, with one line on
  stderr. The digest is the sha256 of the file's size and of the sha256s of its 64 MiB
  pieces, hashed in parallel threads (hashlib releases the GIL): every byte is checked,
  at a fraction of one sequential pass over the 0.8 GB of ``small`` in fp32 (the ratio:
  ``python bench/weight_cache_digest.py``);
- writes go to a temporary name and are renamed into place, so a concurrent reader (two
  shards of one run) sees a whole entry or none.

An entry is written only up to ``ENGINE_UNDER_TEST_WEIGHT_CACHE_MAX_GIB`` (default 2):
``small`` is 0.4 GB in bf16 and 0.8 GB in fp32, ``ouro-1.4b`` 2.8 and 5.6 GB, which a
reports folder should not gain unasked (one line on stderr says how to allow it).

Checkpoint and GGUF models are loaded from their files as before; only the seeded looped
model is memoised.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from ..config import ModelConfig

ENV = "ENGINE_UNDER_TEST_WEIGHT_CACHE"
MAX_ENV = "ENGINE_UNDER_TEST_WEIGHT_CACHE_MAX_GIB"
DEFAULT_MAX_GIB = 2.0
_HERE = Path(__file__).resolve().parent
SOURCES = (
    _HERE / "init.py",
    _HERE / "model.py",
    _HERE / "decoder.py",
    _HERE / "layers.py",
    _HERE.parent / "config.py",
)
PIECE = 64 << 20  # bytes of the file per piece of its digest
# Part of every key: entries of an earlier digest scheme are never looked up.
DIGEST_SCHEME = "sha256 of 64 MiB pieces"


def cache_key(cfg: ModelConfig, dtype: torch.dtype) -> str:
    """The entry name of (cfg, dtype) under this torch and this code."""
    h = hashlib.sha256()
    for part in (repr(cfg), str(dtype), torch.__version__, DIGEST_SCHEME):
        h.update(part.encode())
        h.update(b"\0")
    for source in SOURCES:
        h.update(source.read_bytes())
    return f"{cfg.name}-{h.hexdigest()[:24]}"


def _file_digest(path: Path) -> str:
    """sha256 over the file's size and the sha256 of each PIECE (see the docstring)."""
    size = path.stat().st_size
    h = hashlib.sha256(size.to_bytes(8, "little"))
    if size == 0:
        return h.hexdigest()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with memoryview(mapped) as view:
            starts = range(0, size, PIECE)
            with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
                for piece in pool.map(
                    lambda s: hashlib.sha256(view[s : s + PIECE]).digest(), starts
                ):
                    h.update(piece)
    return h.hexdigest()


def _load(entry: Path, model: torch.nn.Module) -> bool:
    """Fill ``model`` from a verified entry; False when there is none or it is bad."""
    digest = entry.with_suffix(".sha256")
    if not entry.is_file() or not digest.is_file():
        return False
    try:
        if digest.read_text().strip() != _file_digest(entry):
            raise ValueError("sha256 mismatch")
        state = torch.load(entry, map_location="cpu", mmap=True, weights_only=True)
        model.load_state_dict(state, strict=True)
    except Exception as e:  # noqa: BLE001 -- any unreadable entry is rebuilt, never fatal
        print(f"weight cache: {entry.name} is unusable ({e}); rebuilding it", file=sys.stderr)
        return False
    return True


def _max_bytes() -> float:
    raw = os.environ.get(MAX_ENV, "")
    try:
        gib = float(raw) if raw else DEFAULT_MAX_GIB
    except ValueError:
        raise ValueError(f"{MAX_ENV} must be a number of GiB, got {raw!r}") from None
    return gib * 2**30


def _save(entry: Path, model: torch.nn.Module) -> None:
    state = model.state_dict()
    size, limit = sum(t.numel() * t.element_size() for t in state.values()), _max_bytes()
    if size > limit:
        print(
            f"weight cache: not writing {entry.name} ({size / 2**30:.1f} GiB > "
            f"{limit / 2**30:g} GiB; set {MAX_ENV} to allow it)",
            file=sys.stderr,
        )
        return
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    tmp_digest = tmp.with_suffix(".sha256tmp")
    state = {k: v.detach().to("cpu") for k, v in state.items()}
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, tmp)
        tmp_digest.write_text(_file_digest(tmp) + "\n")
        os.replace(tmp, entry)
        os.replace(tmp_digest, entry.with_suffix(".sha256"))
    except OSError as e:  # a full or read-only disk: the run goes on uncached
        for leftover in (tmp, tmp_digest):
            with contextlib.suppress(OSError):
                leftover.unlink()
        print(f"weight cache: could not write {entry} ({e})", file=sys.stderr)


def memoised(
    cfg: ModelConfig,
    dtype: torch.dtype,
    empty: Callable[[], torch.nn.Module],
    fill: Callable[[torch.nn.Module], None],
) -> torch.nn.Module:
    """``empty()`` (parameters allocated on their device), filled from the cache entry of
    (cfg, dtype) when ``ENGINE_UNDER_TEST_WEIGHT_CACHE`` is set and has a good one, else
    by ``fill`` (then written to the cache when it is set)."""
    model = empty()
    folder = os.environ.get(ENV)
    if not folder:
        fill(model)
        return model
    entry = Path(folder) / f"{cache_key(cfg, dtype)}.pt"
    with torch.no_grad():
        if _load(entry, model):
            return model
    fill(model)
    _save(entry, model)
    return model
