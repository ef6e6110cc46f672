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

A cache the user chose (``TRITON_CACHE_DIR``, ``ENGINE_UNDER_TEST_WEIGHT_CACHE`` set)
wins. Nothing is created here: Triton creates its folder when it first compiles, the
weight cache when it first writes an entry, both after every input check of the run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_FOLDER = ".cache"


WEIGHT_CACHE_ENV = "ENGINE_UNDER_TEST_WEIGHT_CACHE"  # engine_under_test.model.weight_cache.ENV


def use_persistent_caches(out_dir: Path) -> None:
    """Point Triton's kernel cache at ``out_dir/.cache/triton`` and the engine's weight
    cache at ``out_dir/.cache/weights``, each unless one is set."""
    root = Path(out_dir).resolve() / CACHE_FOLDER
    os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))
    # Named here, not imported: the toolkit must not import the engine (nor torch).
    os.environ.setdefault(WEIGHT_CACHE_ENV, str(root / "weights"))


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
