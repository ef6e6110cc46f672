"""Read-only view of a run's raw files (`raw/...` of a run folder or an archive)."""

from __future__ import annotations

import builtins
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable


@runtime_checkable
class RawSource(Protocol):
    """Where a raw file too large to hold is read from: a Path on disk (a runner streams
    a large file to disk instead of holding it: issue 38), or an archive member left in
    the zip (`specconform.evidence.members.Member`), checked as it is read."""

    def open(self, mode: str = "rb") -> IO[builtins.bytes]: ...

    def read_bytes(self) -> builtins.bytes: ...


# A raw file's content: its bytes, or a source that streams them.
RawFile = bytes | Path | RawSource


class RawData:
    """Read-only view of a run's raw files, keyed by path relative to the run root
    (e.g. ``raw/cases.json``). Built from a directory or from an archive's members;
    a value that is a Path or another RawSource is read when asked (``open`` streams
    it, ``bytes`` reads it whole)."""

    def __init__(self, files: Mapping[str, RawFile]):
        self._files = dict(files)

    def names(self) -> list[str]:
        return sorted(self._files)

    def has(self, name: str) -> bool:
        return name in self._files

    def _get(self, name: str) -> RawFile:
        try:
            return self._files[name]
        except KeyError:
            raise KeyError(f"raw data has no file {name!r}") from None

    def bytes(self, name: str) -> builtins.bytes:
        value = self._get(name)
        return value if isinstance(value, builtins.bytes) else value.read_bytes()

    def open(self, name: str) -> IO[builtins.bytes]:
        """The file as a binary stream, without reading it whole."""
        value = self._get(name)
        return io.BytesIO(value) if isinstance(value, builtins.bytes) else value.open("rb")

    def json(self, name: str) -> Any:
        return json.loads(self.bytes(name))

    def csv(self, name: str):
        import pandas as pd

        return pd.read_csv(io.BytesIO(self.bytes(name)))
