"""Reading an evidence archive: its members, checked for a safe, single-folder layout.

Shared by `verify` (which then checks every digest and signature) and `report` (which
only reads). Reading never trusts the archive: member names are validated, every member
is decompressed (so a corrupted entry fails its CRC here), and JSON is parsed with a
message naming the file.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from specconform.errors import EvidenceError, UsageError
from specconform.evidence.sha256sums import check_member_name, sha256_file
from specconform.results import Evaluation, RawData, TestRow, Verdict

MAX_TOTAL_BYTES = 8 << 30  # refuse zip bombs: no real run has 8 GiB of evidence


@dataclass(frozen=True)
class ArchiveContents:
    """An archive's files keyed by path relative to its top folder (e.g. `raw/x.json`)."""

    path: Path
    top: str
    files: dict[str, bytes]

    @cached_property
    def sha256(self) -> str:
        """Digest of the archive file itself, as a reviewer would quote it."""
        return sha256_file(self.path)

    def json(self, name: str) -> Any:
        try:
            data = self.files[name]
        except KeyError:
            raise EvidenceError(f"{name}: missing from the archive") from None
        try:
            return json.loads(data)
        except ValueError:
            raise EvidenceError(f"{name}: not valid JSON") from None

    def json_object(self, name: str) -> dict:
        value = self.json(name)
        if not isinstance(value, dict):
            raise EvidenceError(f"{name}: not a JSON object")
        return value

    def raw_data(self) -> RawData:
        """Every member under raw/, keyed 'raw/...', for a kind's re-evaluation."""
        return RawData({n: b for n, b in self.files.items() if n.startswith("raw/")})

    def stated_rows(self) -> list[dict]:
        """results/tests.json rows as stored (a list, or an object with 'tests')."""
        rows = self.json("results/tests.json")
        if isinstance(rows, dict) and "tests" in rows:
            rows = rows["tests"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise EvidenceError("results/tests.json: not a list of test rows")
        return rows

    def evaluation(self) -> Evaluation:
        """The evaluation the archive states (results/tests.json and verdict.json)."""
        return Evaluation(tuple(row_from_json(r, "results/tests.json")
                                for r in self.stated_rows()),
                          verdict_from_json(self.json_object("verdict.json")))


def read_archive(zip_path: Path) -> ArchiveContents:
    """Open `zip_path` and return its members; EvidenceError unless it is a readable zip
    whose regular entries all lie under one top folder."""
    zip_path = Path(zip_path)
    if not zip_path.is_file():
        raise UsageError(f"{zip_path}: archive not found")
    try:
        with zipfile.ZipFile(zip_path) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
            if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
                raise EvidenceError(f"{zip_path}: archive expands past {MAX_TOTAL_BYTES} bytes")
            members = {}
            for info in infos:
                if info.filename in members:
                    raise EvidenceError(f"{info.filename}: entry appears twice in the zip")
                members[info.filename] = zf.read(info)
    # zlib.error: corrupt compressed data; NotImplementedError: unknown compression;
    # RuntimeError: an encrypted entry. All mean the archive is not what was sealed.
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError,
            ValueError, NotImplementedError, RuntimeError) as exc:
        raise EvidenceError(f"{zip_path}: not a readable zip archive ({exc})") from None
    if not members:
        raise EvidenceError(f"{zip_path}: archive is empty")
    tops = {name.split("/", 1)[0] for name in members}
    if len(tops) != 1 or any("/" not in name for name in members):
        raise EvidenceError(f"{zip_path}: entries must lie under one top folder, found "
                            f"{', '.join(sorted(tops))}")
    top = tops.pop()
    files = {}
    for name, data in members.items():
        rel = name.split("/", 1)[1]
        check_member_name(rel)
        files[rel] = data
    return ArchiveContents(zip_path, top, files)


def row_from_json(row: dict, name: str) -> TestRow:
    """A TestRow from its JSON form (either results schema); `detail` may be an object or
    a JSON string."""
    try:
        return TestRow.from_json(row)
    except (KeyError, TypeError, ValueError) as exc:
        raise EvidenceError(f"{name}: malformed test row {row.get('test')!r} ({exc})") from None


def verdict_from_json(obj: dict) -> Verdict:
    try:
        return Verdict.from_json(obj)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EvidenceError(f"verdict.json: malformed ({exc})") from None


def _float(value) -> float | None:
    return None if value is None else float(value)
