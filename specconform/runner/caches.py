"""Compile caches that outlive the process, beside the evidence (issue 16, time to
verdict): Triton's compiled kernels under ``<out>/.cache/triton`` (``reports/.cache``
by default), so a new process -- a fresh CI runner that restores ``reports/.cache``, or
a GPU box whose home directory is not kept -- loads the engine's kernels instead of
compiling them again (about 0.1-1 s per kernel). A cache the user chose
(``TRITON_CACHE_DIR`` set) wins. Nothing is created here: Triton creates the folder
when it first compiles, which is after every input check of the run."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_FOLDER = ".cache"


def use_persistent_caches(out_dir: Path) -> None:
    """Point Triton's kernel cache at ``out_dir/.cache/triton`` unless one is set."""
    cache = Path(out_dir).resolve() / CACHE_FOLDER / "triton"
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache))
