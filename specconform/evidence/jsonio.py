"""The one JSON encoder and number formatter of evidence files.

- :func:`canonical_json_bytes`: sorted keys, two-space indent, UTF-8, one trailing
  newline; every JSON file the evidence layer writes, so two identical runs give
  identical files.
- :func:`compact_json`: the same object on one line (sorted keys, no spaces), for JSON
  embedded in CSV cells and for comparisons.
- :func:`json_number`: a float as JSON can state it: non-finite values (an
  out-of-support χ², a p-value that does not exist) become None (null).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specconform.results import json_number  # noqa: F401 (defined below evidence; re-exported)


def canonical_json_bytes(obj: Any) -> bytes:
    """Serialize `obj` deterministically (sorted keys, indent 2, trailing newline)."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def compact_json(obj: Any) -> str:
    """`obj` on one line: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
