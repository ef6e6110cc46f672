"""Read-only view of a run's raw files (`raw/...` of a run folder or an archive)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any


class RawData:
    """Read-only view of a run's raw files, keyed by path relative to the run root
    (e.g. ``raw/cases.json``). Built from a directory or from an archive's members."""

    def __init__(self, files: Mapping[str, bytes]):
        self._files = dict(files)

    def names(self) -> list[str]:
        return sorted(self._files)

    def has(self, name: str) -> bool:
        return name in self._files

    def bytes(self, name: str) -> bytes:
        try:
            return self._files[name]
        except KeyError:
            raise KeyError(f"raw data has no file {name!r}") from None

    def json(self, name: str) -> Any:
        return json.loads(self.bytes(name))

    def csv(self, name: str):
        import pandas as pd

        return pd.read_csv(io.BytesIO(self.bytes(name)))
