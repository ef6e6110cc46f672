"""Reading an evidence archive: its members, checked for a safe, single-folder layout.

Shared by `verify` (which then checks every digest and signature) and `report` (which
only reads). Reading never trusts the archive, and runs in bounded memory whatever the
input: the raw zip structure is checked first, byte by byte (`zipcheck`: every zip
feature the writer does not use is refused), then the central directory (regular files
only: no directory, symlink, device, fifo or socket entries; no duplicates, not even by
case; safe names under one top folder; no encryption; stored or deflate; declared sizes
and compression ratio within the bounds below), then every member is inflated in
chunks, counting the bytes actually produced against the same bounds and against its
declared size (declared sizes can lie), so a zip bomb is refused after at most
MAX_TOTAL_BYTES of output and usually before inflating anything. A corrupted entry
fails its CRC here; JSON is parsed with a message naming the file.

Memory does not grow with the archive (issue 38): members of at most
`members.HELD_MEMBER_BYTES` are held (together within `members.MAX_HELD_BYTES`), larger
ones are hashed on this first pass and left in the zip, streamed again, checked, by
whoever reads them (`members.Member`; the distribution kind reduces raw/samples.csv
in chunks); a whole read of one is charged to the same held bound.
"""

from __future__ import annotations

import hashlib
import json
import stat
import struct
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from specconform.details import SCHEMA1_RECORDS
from specconform.evidence import members
from specconform.evidence.members import (
    ArchiveFiles,
    EntryData,
    HeldBudget,
    Member,
    archive_stamp,
    inflate,
)
from specconform.evidence.sha256sums import check_member_name, sha256_file, sha256_hex
from specconform.evidence.zipcheck import check_structure, one_line, shown
from specconform.results import Evaluation, RawData, TestRow, Verdict
from specconform.util.errors import EvidenceError, SpecconformError, UsageError

# Bounds that keep `verify` and `report` under MEMORY_BOUND_BYTES of RSS for any input.
# Members read whole are held in memory and parsed (pandas, json: several times their
# size), so what is held is capped at members.MAX_HELD_BYTES (48 MiB). Measured peak RSS
# of `verify` (2 shared CPU cores, CPython 3.11) when everything was held: the 4 GB bomb
# 140 MiB (refused by ratio); an unsigned archive with a 45 MiB samples.csv, fully
# recomputed, 441 MiB; with a 44 MiB reference.json, 417 MiB (a 119 MiB samples.csv took
# 932 MiB: hence 48, not 128). Streamed members cost one chunk at a time whatever their
# size (docs/gpu-runs.md, "Streamed reduction": verify of fp32_t2 at 10^5 and 10^6 seeds).
MEMORY_BOUND_BYTES = 512 << 20
# Bytes inflated from all entries together (declared, then counted while inflating): a
# bound on the work a hostile archive can cause (inflating and hashing 4 GiB twice takes
# about a minute), not on memory. fp32_t2 carries ~300 bytes of raw/samples.csv a seed
# (5 groups; 1,474,830 bytes at 5,000 seeds in the committed archive; 8-digit seeds add
# ~5), so 10^7 seeds is ~3.0 GB, in one entry with zip64 sizes (zipcheck); 4 GiB
# (4.29 GB) admits it with 40 % to spare.
MAX_TOTAL_BYTES = 4 << 30
MAX_ENTRIES = 10_000
# The compression ratio bound and the chunk size: members.MAX_RATIO, members.CHUNK_BYTES.


@dataclass(frozen=True)
class ArchiveContents:
    """An archive's files keyed by path relative to its top folder (e.g. `raw/x.json`)."""

    path: Path
    top: str
    # bytes by name; an ArchiveFiles from read_archive (large members streamed from the
    # zip, read whole only on indexing, within the held bound), or any mapping (tests)
    files: Mapping[str, bytes]
    # sha256 hex of each member, computed while inflating it (same keys as `files`)
    digests: dict[str, str] = field(default_factory=dict)

    def digest(self, name: str) -> str:
        found = self.digests.get(name)
        return found if found is not None else sha256_hex(self.files[name])

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
        """Every member under raw/, keyed 'raw/...', for a kind's re-evaluation: large
        members as streams from the zip (or files kept beside it), not bytes."""
        files = self.files
        if isinstance(files, ArchiveFiles):
            return RawData({n: files.source(n) for n in files if n.startswith("raw/")})
        return RawData({n: files[n] for n in files if n.startswith("raw/")})

    def with_external(self, present: Mapping[str, tuple[Path, int, str]]) -> ArchiveContents:
        """These contents plus files kept beside the archive (name -> (path, size,
        sha256), checked by `external.check_external`), streamed from disk and checked
        again as they are read."""
        files = self.files
        budget = files.budget if isinstance(files, ArchiveFiles) else HeldBudget()
        held = files if isinstance(files, ArchiveFiles) else ArchiveFiles(files, budget)
        return ArchiveContents(self.path, self.top, held.with_kept(present), self.digests)

    def stated_rows(self) -> list[dict]:
        """results/tests.json rows as stored (a list, or an object with 'tests')."""
        rows = self.json("results/tests.json")
        if isinstance(rows, dict) and "tests" in rows:
            rows = rows["tests"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise EvidenceError("results/tests.json: not a list of test rows")
        return rows

    def evaluation(self) -> Evaluation:
        """The evaluation the archive states (results/tests.json and verdict.json); each
        row's detail read as the typed record of the archive's protocol kind."""
        protocol = self.json_object("protocol.json") if "protocol.json" in self.files else {}
        kind = protocol.get("kind") if isinstance(protocol.get("kind"), str) else None
        # A kind with a frozen schema-1 layout (details.SCHEMA1_RECORDS: archives from
        # before protocols pre-registered their verdict rule) is read with it.
        schema = 1 if kind in SCHEMA1_RECORDS and "verdict" not in protocol else 2
        return Evaluation(
            tuple(
                row_from_json(r, "results/tests.json", kind, schema=schema)
                for r in self.stated_rows()
            ),
            verdict_from_json(self.json_object("verdict.json")),
        )


def read_archive(zip_path: Path) -> ArchiveContents:
    """Open `zip_path` and return its members; EvidenceError unless it is a readable zip
    of regular-file entries, all under one top folder, within the bounds above (and the
    structure zipcheck allows); every message is one line."""
    try:
        return _read_archive(Path(zip_path))
    except SpecconformError as exc:
        raise one_line(exc) from None


def _read_archive(zip_path: Path) -> ArchiveContents:
    try:
        found, regular = zip_path.exists(), zip_path.is_file()
    except OSError as exc:  # a name too long for the file system (10,000 characters)
        raise UsageError(f"{shown(str(zip_path))}: cannot read ({exc.strerror})") from None
    if not found:
        raise UsageError(f"{zip_path}: archive not found")
    if not regular:  # a directory, FIFO or device (/dev/zero)
        raise UsageError(f"{zip_path}: not a regular file; an archive is a .zip file")
    try:
        with open(zip_path, "rb") as fh:
            # The raw structure first (zipcheck: no encryption, spanning, data
            # descriptors, extra bytes, or local headers that disagree), then zipfile,
            # which reads the central directory into memory.
            size = fh.seek(0, 2)
            entries = check_structure(fh, size, shown(str(zip_path)), MAX_ENTRIES)
            stamp = archive_stamp(fh)
            with zipfile.ZipFile(fh) as zf:
                infos = zf.infolist()
                if [_declared(i) for i in infos] != [_declared(e) for e in entries]:
                    raise EvidenceError(f"{zip_path}: the central directory reads two ways")
                top = _check_layout(zip_path, infos)
            budget = HeldBudget()
            sources: dict[str, bytes | Member] = {}
            digests: dict[str, str] = {}
            left = MAX_TOTAL_BYTES
            for info, entry in zip(infos, entries, strict=True):
                rel = info.filename.split("/", 1)[1]
                data = EntryData(
                    shown(info.filename),
                    entry.data_offset,
                    *(entry.method, entry.compressed, entry.size, entry.crc),
                )
                held = entry.size <= members.HELD_MEMBER_BYTES
                if held:
                    budget.charge(rel, entry.size)
                body, digest = _read_entry(fh, data, left, keep=held)
                left -= entry.size
                digests[rel] = digest
                sources[rel] = body if held else Member(zip_path, rel, data, digest, stamp, budget)
    # zlib.error: corrupt compressed data; NotImplementedError: unknown compression;
    # RuntimeError: an encrypted entry. All mean the archive is not what was sealed.
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
        struct.error,
    ) as exc:
        raise EvidenceError(f"{zip_path}: not a readable zip archive ({_one_line(exc)})") from None
    return ArchiveContents(zip_path, top, ArchiveFiles(sources, budget), digests)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_layout(zip_path: Path, infos: list[zipfile.ZipInfo]) -> str:
    """Every entry a regular file with a safe name under one top folder, none twice,
    none encrypted or oddly compressed, and declared sizes within the bounds; returns
    the top folder. Decides from the central directory alone, before inflating."""
    if not infos:
        raise EvidenceError(f"{zip_path}: archive is empty")
    if len(infos) > MAX_ENTRIES:
        raise EvidenceError(f"{zip_path}: {len(infos)} entries, more than {MAX_ENTRIES}")
    seen: set[str] = set()
    folded: dict[str, str] = {}
    declared = 0
    for info in infos:
        name = info.filename
        if name in seen:
            raise EvidenceError(f"{shown(name)}: entry appears twice in the zip")
        seen.add(name)
        # Names equal but for case collide when extracted on macOS and Windows.
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            raise EvidenceError(f"{shown(name)}: entry differs from {shown(other)} only in case")
        if not name.isprintable():
            raise EvidenceError(f"{shown(name)}: file name with a control character")
        kind = _entry_type(info)
        if kind != "file":
            raise EvidenceError(f"{shown(name)}: a {kind} entry; evidence holds regular files only")
        if name.startswith("/") or "/" not in name:
            raise EvidenceError(f"{zip_path}: entry {name!r} is not under the archive's top folder")
        check_member_name(name)
        if info.flag_bits & 0x1:
            raise EvidenceError(f"{shown(name)}: encrypted entry")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise EvidenceError(
                f"{shown(name)}: compression method {info.compress_type} is not stored or deflate"
            )
        members.check_ratio(name, info.file_size, info.compress_size)
        declared += info.file_size
        if info.file_size > MAX_TOTAL_BYTES or declared > MAX_TOTAL_BYTES:
            raise EvidenceError(
                f"{name}: archive expands past the {MAX_TOTAL_BYTES >> 20} MiB evidence bound"
            )
    tops = {name.split("/", 1)[0] for name in seen}
    if len(tops) != 1:
        raise EvidenceError(
            f"{zip_path}: entries must lie under one top folder, found {', '.join(sorted(tops))}"
        )
    return tops.pop()


def _entry_type(info: zipfile.ZipInfo) -> str:
    """'file', or what else the entry is: directory (a trailing '/' or the DOS
    directory bit), or the Unix file type in the high 16 bits of external_attr
    (symlink, device, fifo, socket). A type of 0 (no Unix mode) counts as a file."""
    if info.filename.endswith("/") or info.external_attr & 0x10:
        return "directory"
    mode = info.external_attr >> 16
    file_type = stat.S_IFMT(mode)
    if file_type in (0, stat.S_IFREG):
        return "file"
    return {
        stat.S_IFDIR: "directory",
        stat.S_IFLNK: "symlink",
        stat.S_IFCHR: "device",
        stat.S_IFBLK: "device",
        stat.S_IFIFO: "fifo",
        stat.S_IFSOCK: "socket",
    }.get(file_type, f"type-{file_type:o}")


def _declared(entry) -> tuple[int, int, int, int]:
    """An entry's offset, sizes and CRC, from zipfile's ZipInfo or zipcheck's Entry."""
    if isinstance(entry, zipfile.ZipInfo):
        return (entry.header_offset, entry.compress_size, entry.file_size, entry.CRC)
    return (entry.offset, entry.compressed, entry.size, entry.crc)


def _read_entry(fh, data: EntryData, budget: int, *, keep: bool) -> tuple[bytes, str]:
    """Inflate one entry in chunks (`members.inflate`: its declared size, ratio and CRC
    checked on what comes out, since declared sizes can lie), within `budget` bytes of
    the total bound. Returns (its bytes if `keep` else b"", sha256 hex)."""
    chunks: list[bytes] = []
    produced = 0
    digest = hashlib.sha256()
    for chunk in inflate(fh, data):
        produced += len(chunk)
        if produced > budget:
            raise EvidenceError(
                f"{data.name}: archive expands past the {MAX_TOTAL_BYTES >> 20} MiB evidence bound"
            )
        digest.update(chunk)
        if keep:
            chunks.append(chunk)
    return b"".join(chunks), digest.hexdigest()


def row_from_json(row: dict, name: str, kind: str | None = None, *, schema: int = 2) -> TestRow:
    """A TestRow from its JSON form (either results schema); `detail` may be an object or
    a JSON string, read as a record of `kind` (specconform.details.parse_detail)."""
    try:
        return TestRow.from_json(row, kind, schema=schema)
    except (KeyError, TypeError, ValueError) as exc:
        raise EvidenceError(f"{name}: malformed test row {row.get('test')!r} ({exc})") from None


def verdict_from_json(obj: dict) -> Verdict:
    try:
        return Verdict.from_json(obj)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EvidenceError(f"verdict.json: malformed ({exc})") from None


def _float(value) -> float | None:
    return None if value is None else float(value)
