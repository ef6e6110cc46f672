"""This checkout first on sys.path, for the bench scripts: `python bench/<script>.py`
then runs the specconform and engine_under_test beside it, not an installed copy (a
worktree with the main venv; a copied tree whose venv points elsewhere).

A script imports it as ``import _checkout  # noqa: F401`` or ``from _checkout import
ROOT``: ruff's import order puts it among the third-party imports (first there, by its
underscore, in its group), and every import of ours is first-party, sorted after them;
so the order ruff enforces is the one this needs, without code between the imports.
bench/ itself is on sys.path as the script's folder (a test that loads a script puts
it there: tests/toolkit/script_loader.load_bench)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout
sys.path.insert(0, str(ROOT))
