"""Where a bench script's Markdown goes: the file of --out, else standard output."""

from __future__ import annotations

import sys
from pathlib import Path


def write_report(text: str, out: str | None) -> int:
    """Write ``text`` to ``out`` (a path) or to stdout; 0, the script's exit code."""
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
