"""Caches that outlive the process, beside the evidence (issue 16, time to verdict), under
``<out>/.cache`` (``reports/.cache`` by default), so a new process -- a fresh CI runner
that restores ``reports/.cache``, or a GPU box whose home directory is not kept --
loads instead of recomputing:

- ``triton``: Triton's compiled kernels (about 0.1-1 s each to compile);
- ``weights``: the bundled engine's seeded weights
  (engine_under_test/model/weight_cache.py: keyed by the configuration, dtype, torch
  version and the initialisation's source, sha256-checked; 0.4-0.8 GB an entry for
  the small preset, whose build it takes from 6.9 s to 1.25 s on a 2-core CPU; on the
  H200 the gain was within the engine load's noise, docs/gpu-runs.md session 7).

- ``pycache``: Python bytecode of the modules imported from then on (torch, scipy,
  pandas, the engine), only where the interpreter has none and keeps none: bytecode
  writing is off (``PYTHONDONTWRITEBYTECODE``, as in many container images), no
  ``PYTHONPYCACHEPREFIX`` is set, and the installed torch (else scipy) has no
  bytecode beside its sources. Then every process compiled torch from source: on the
  lab's H200 image (no ``__pycache__`` under torch, PYTHONDONTWRITEBYTECODE=1)
  ``import torch`` took 3.9-4.1 s against 1.4-1.9 s with bytecode kept, and fp32_t2
  at 5,000 seeds 15.0-15.4 s against 11.4-12.3 s (alternating A/B in one call,
  docs/gpu-runs.md session 9). Nothing is written beside the sources. An install
  whose bytecode was compiled by pip is left alone: a prefix would hide that
  bytecode (Python then reads only the prefix) and recompile everything once per
  output folder.

A cache the user chose (``TRITON_CACHE_DIR``, ``ENGINE_UNDER_TEST_WEIGHT_CACHE``,
``PYTHONPYCACHEPREFIX`` set) wins. Nothing is created here: Triton creates its folder
when it first compiles, the weight cache when it first writes an entry (both after the
run's input checks), Python the bytecode folder at the next import of a module it has
not cached; a run that stops with an error takes every cache folder it created
(``persistent_caches``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_FOLDER = ".cache"


WEIGHT_CACHE_ENV = "ENGINE_UNDER_TEST_WEIGHT_CACHE"  # engine_under_test.model.weight_cache.ENV
# The packages whose bytecode tells whether this installation has any: the first one
# installed decides (torch is most of a run's import time, scipy of a reviewer's).
BYTECODE_PROBES = ("torch", "scipy")


def _installed_without_bytecode() -> bool:
    """Whether the first installed probe package has no bytecode beside its sources
    (found without importing it)."""
    for name in BYTECODE_PROBES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a broken install, or an odd sys.modules entry
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        return not os.path.exists(importlib.util.cache_from_source(spec.origin))
    return False


def use_persistent_caches(out_dir: Path) -> None:
    """Point Triton's kernel cache at ``out_dir/.cache/triton``, the engine's weight
    cache at ``out_dir/.cache/weights``, each unless one is set, and Python's bytecode
    at ``out_dir/.cache/pycache`` when the installation has none and keeps none."""
    root = Path(out_dir).resolve() / CACHE_FOLDER
    os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))
    # Named here, not imported: the toolkit must not import the engine (nor torch).
    os.environ.setdefault(WEIGHT_CACHE_ENV, str(root / "weights"))
    if sys.dont_write_bytecode and sys.pycache_prefix is None and _installed_without_bytecode():
        # Read at each import (importlib.util.cache_from_source): modules imported from
        # now on are loaded from, or compiled once into, root/pycache.
        sys.pycache_prefix = str(root / "pycache")
        sys.dont_write_bytecode = False


@contextmanager
def persistent_caches(out_dir: Path) -> Iterator[None]:
    """``use_persistent_caches`` for one run, undone when the run stops with an error: a
    cache folder it created goes (bad input leaves no output behind, contract of every
    command), and so does ``out_dir`` if the run created it and left it empty. A cache
    that existed before is kept whatever happens."""
    root = Path(out_dir).resolve() / CACHE_FOLDER
    out_existed, root_existed = root.parent.exists(), root.exists()
    use_persistent_caches(out_dir)
    try:
        yield
    except BaseException:
        if not root_existed:
            shutil.rmtree(root, ignore_errors=True)
        if not out_existed and root.parent.is_dir() and not any(root.parent.iterdir()):
            root.parent.rmdir()
        raise
