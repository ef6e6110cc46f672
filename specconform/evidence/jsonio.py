"""Canonical JSON for evidence files: the same object always gives the same bytes.

Sorted keys, two-space indent, UTF-8, one trailing newline. Used for every JSON file the
evidence layer writes, so that two identical runs give identical files.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def canonical_json_bytes(obj: Any) -> bytes:
    """Serialize `obj` deterministically (sorted keys, indent 2, trailing newline)."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def write_json(path: Path, obj: Any) -> None:
    """Write `obj` as canonical JSON to `path` atomically."""
    write_bytes_atomic(path, canonical_json_bytes(obj))


def write_bytes_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    A reader (or a crash) never sees a half-written file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
