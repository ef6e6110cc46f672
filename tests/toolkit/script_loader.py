"""Scripts that are not modules of a package (bench/*.py, tests/data/behaviour/record.py)
loaded by tests from their path: each call executes the file afresh, so a test gets the
module-level state a `python <script>` run would start with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.toolkit.cli_helpers import ROOT


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """The module of the script at ``path`` (under the module name ``name``, by default
    the file's stem)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py``, loaded afresh, with bench/ on sys.path as when it runs as a
    script: its sibling modules (bench/_checkout.py first) import by name."""
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return load_script(ROOT / "bench" / f"{name}.py")
