"""An archive's members as the reader hands them out: small ones held, large ones streamed.

A fp32_t2 run of 10^6 seeds carries ~240 MB of raw/samples.csv (issue 38), which the
distribution kind reduces in chunks (`kinds.distribution.tally`); holding it would
cost its size several times over. So the reader keeps only members of at most
HELD_MEMBER_BYTES in memory and leaves the larger ones in the zip as a `Member`: its
sha256 comes from the reader's first pass (inflated in chunks, nothing kept), and every
`open()` inflates it again from the archive.

Every pass over an entry's data goes through `inflate`, not zipfile (which stops at the
declared size without saying whether more would come): the raw deflate data between
the entry's local header and the next entry (zipcheck laid them end to end) is inflated
a chunk at a time, and the entry is refused (EvidenceError: one line, exit 3) as soon as

- more bytes come out than its declared size (checked while inflating, so a lying
  header costs at most its declared size), or more than MAX_RATIO times its compressed
  size beyond RATIO_FREE_BYTES;
- its deflate data ends before its declared size, or goes on after the deflate stream
  ends (bytes the declared sizes hide), or its CRC differs.

A streamed member also checks that the archive file is the one first read (device,
inode, size, mtime) and, at the end of the stream, that its sha256 is the first pass's:
what a consumer read is what SHA256SUMS and the signature cover. Files kept beside the
archive (``--max-archive-size``: `KeptFile`) are streamed and checked the same way.

A whole read of a streamed member (`read_bytes()`, `ArchiveFiles[name]`: kinds that
parse a raw file at once, reports) is charged to the archive's `HeldBudget`: what the
reader holds plus every member read whole, each counted once, stays within the 48 MiB
under which the reader held every member before streaming, so an archive the old reader
accepted reads the same; a larger one can only be streamed.
"""

from __future__ import annotations

import hashlib
import io
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from specconform.util.errors import EvidenceError

# What the reader holds in memory at most: the members it keeps plus every member read
# whole (the bound all of an archive's members were held under before issue 38; its
# measurements are in `reader`).
MAX_HELD_BYTES = 48 << 20
# Members larger than this are left in the zip and streamed. JSON members of the
# committed archives are at most 0.4 MB; raw CSVs are larger and read in chunks.
HELD_MEMBER_BYTES = 1 << 20
# Deflate reaches ~1030:1 on zeros; CSV and JSON evidence compresses 3-20:1. Entries
# smaller than RATIO_FREE_BYTES cannot exhaust anything and are not ratio-checked.
MAX_RATIO = 200
RATIO_FREE_BYTES = 1 << 20
CHUNK_BYTES = 1 << 20
STORED, DEFLATED = 0, 8


def check_ratio(name: str, produced: int, compressed: int) -> None:
    """Refuse `name` once `produced` inflated bytes exceed MAX_RATIO times `compressed`."""
    if produced > RATIO_FREE_BYTES and produced > MAX_RATIO * max(compressed, 1):
        raise EvidenceError(
            f"{name}: compression ratio above {MAX_RATIO}:1 (a zip bomb, not evidence)"
        )


@dataclass(frozen=True)
class EntryData:
    """Where one entry's data lies in the archive file and what it declares."""

    name: str  # as shown in messages
    offset: int  # first byte of the compressed data (after the local header and name)
    method: int  # STORED or DEFLATED (zipcheck refuses the rest)
    compressed: int
    size: int
    crc: int


def inflate(fh: IO[bytes], entry: EntryData) -> Iterator[bytes]:
    """The entry's inflated bytes, at most CHUNK_BYTES at a time, checked as above."""
    name = entry.name
    fh.seek(entry.offset)
    left, produced, crc = entry.compressed, 0, 0
    engine = zlib.decompressobj(-15) if entry.method == DEFLATED else None
    pending = b""
    while True:
        if not pending and left:
            pending = fh.read(min(CHUNK_BYTES, left))
            if not pending:
                raise EvidenceError(f"{name}: truncated entry data")
            left -= len(pending)
        if engine is None:  # stored: the data is the member
            data, pending = pending, b""
        else:
            try:
                data = engine.decompress(pending, CHUNK_BYTES)
            except zlib.error as exc:
                raise EvidenceError(f"{name}: corrupt deflate data ({exc})") from None
            pending = engine.unconsumed_tail
        produced += len(data)
        if produced > entry.size:
            raise EvidenceError(
                f"{name}: inflates past its declared size of {entry.size} bytes (not evidence)"
            )
        check_ratio(name, produced, entry.compressed)
        crc = zlib.crc32(data, crc)
        if data:
            yield data
        if engine is not None and engine.eof:
            if engine.unused_data or pending or left:
                raise EvidenceError(f"{name}: bytes after the end of its deflate data")
            break
        if not data and not pending and not left:
            if engine is not None:  # input spent, stream not ended
                raise EvidenceError(f"{name}: deflate data ends early")
            break
    if produced != entry.size:
        raise EvidenceError(f"{name}: {produced} bytes, not the {entry.size} its headers declare")
    if crc != entry.crc:
        raise EvidenceError(f"{name}: CRC does not match (a corrupted entry)")


class HeldBudget:
    """Bytes of members in memory, each member counted once (`charge`)."""

    def __init__(self, limit: int | None = None):
        self.limit = MAX_HELD_BYTES if limit is None else limit
        self.used = 0
        self._charged: set[str] = set()

    def charge(self, name: str, size: int) -> None:
        if name in self._charged:
            return
        if self.used + size > self.limit:
            bound = f"{self.limit >> 20} MiB" if self.limit >= 1 << 20 else f"{self.limit} byte"
            raise EvidenceError(
                f"{name}: {size} bytes read whole would pass the {bound} evidence bound "
                "for members held in memory (only raw/samples.csv of a fixed-N "
                "distribution protocol is read in chunks)"
            )
        self.used += size
        self._charged.add(name)


def archive_stamp(fh) -> tuple[int, int, int, int]:
    """What identifies an open archive file between two reads of it."""
    st = os.fstat(fh.fileno())
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class Member:
    """A member left in the zip: `open()` streams it, checked; `read_bytes()` reads it
    whole, charged to `budget`."""

    archive: Path
    rel: str  # name under the top folder (raw/samples.csv)
    data: EntryData
    sha256: str
    stamp: tuple[int, int, int, int]
    budget: HeldBudget = field(compare=False, repr=False)

    @property
    def size(self) -> int:
        return self.data.size

    def open(self, mode: str = "rb") -> IO[bytes]:
        if mode != "rb":
            raise ValueError("an archive member opens for binary reading only")
        fh = open(self.archive, "rb")
        if archive_stamp(fh) != self.stamp:
            fh.close()
            raise EvidenceError(f"{self.archive}: changed since it was first read")
        return _stream(self.rel, self.size, self.sha256, inflate(fh, self.data), fh)

    def read_bytes(self) -> bytes:
        self.budget.charge(self.rel, self.size)
        with self.open() as fh:
            return fh.read()


@dataclass(frozen=True)
class KeptFile:
    """A file kept beside the archive (``--max-archive-size``) whose size and sha256
    `external.check_external` checked against the signed manifest: streamed from disk
    and checked again as it is read, like a `Member`."""

    path: Path
    rel: str
    size: int
    sha256: str
    budget: HeldBudget = field(compare=False, repr=False)

    def open(self, mode: str = "rb") -> IO[bytes]:
        if mode != "rb":
            raise ValueError("a kept file opens for binary reading only")
        fh = open(self.path, "rb")
        chunks = iter(lambda: fh.read(CHUNK_BYTES), b"")
        return _stream(self.rel, self.size, self.sha256, chunks, fh)

    def read_bytes(self) -> bytes:
        self.budget.charge(self.rel, self.size)
        with self.open() as fh:
            return fh.read()


def _stream(rel: str, size: int, sha256: str, chunks: Iterator[bytes], fh) -> IO[bytes]:
    return io.BufferedReader(_CheckedStream(rel, size, sha256, chunks, fh), CHUNK_BYTES)


class _CheckedStream(io.RawIOBase):
    """Bytes from `chunks`, hashed as they pass; at the end, `size` and `sha256` must be
    the first pass's (or the manifest's), else EvidenceError."""

    def __init__(self, rel: str, size: int, sha256: str, chunks: Iterator[bytes], fh):
        self._rel, self._size, self._sha256 = rel, size, sha256
        self._chunks, self._fh = chunks, fh
        self._left = b""
        self._produced = 0
        self._digest = hashlib.sha256()
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._left and not self._done:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                self._done = True
                if self._produced != self._size or self._digest.hexdigest() != self._sha256:
                    raise EvidenceError(f"{self._rel}: changed since it was first read") from None
            except OSError as exc:
                raise EvidenceError(f"{self._rel}: not readable ({exc.strerror})") from None
            self._produced += len(self._left)
            if self._produced > self._size:
                raise EvidenceError(f"{self._rel}: changed since it was first read")
            self._digest.update(self._left)
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def readall(self) -> bytes:
        # io.RawIOBase reads 8 KiB at a time; whole reads take a chunk at a time.
        parts = []
        while data := self.read(CHUNK_BYTES):
            parts.append(data)
        return b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self._fh.close()
        super().close()


# A member's source for `RawData`: its bytes, or something that opens and reads it.
Source = bytes | Member | KeptFile


class ArchiveFiles(Mapping[str, bytes]):
    """An archive's members by name (under the top folder), in archive order. Indexing
    gives a member's bytes: held ones at once, others read whole under the budget;
    `source(name)` gives what a consumer that streams should open."""

    def __init__(self, sources: Mapping[str, Source], budget: HeldBudget):
        self._sources = dict(sources)
        self.budget = budget

    def __getitem__(self, name: str) -> bytes:
        value = self._sources[name]
        return value if isinstance(value, bytes) else value.read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def __contains__(self, name: object) -> bool:
        return name in self._sources

    def source(self, name: str) -> Source:
        return self._sources[name]

    def with_kept(self, kept: Mapping[str, tuple[Path, int, str]]) -> ArchiveFiles:
        """These members plus files kept beside the archive: name -> (path, size, sha256)
        as checked against the manifest."""
        extra = {
            name: KeptFile(path, name, size, sha256, self.budget)
            for name, (path, size, sha256) in kept.items()
        }
        return ArchiveFiles({**self._sources, **extra}, self.budget)
