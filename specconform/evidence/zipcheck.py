"""The zip structure of an evidence archive, checked byte by byte before `zipfile` reads it.

`zipfile` trusts much of what a zip says: it reads the encrypted flag only from the
central directory (an entry whose *local* header says "encrypted" used to verify), it
accepts data before the first entry, between entries and after the end record, spanned
(multi-disk) end records, data descriptors, and local headers that disagree with the
central directory on everything but the name. The writer (`archive.write_reproducible_zip`)
uses none of that, so the reader refuses all of it:

- one end-of-central-directory record, last in the file, without comment, for disk 0 of
  one disk, counting every entry; no zip64 records;
- a central directory that ends where the end record starts, at most MAX_CENTRAL_BYTES;
- central entries on disk 0, without comment, and without extra field but the zip64
  sizes of an entry larger than 2 GiB (below), with general-purpose flags
  within ALLOWED_FLAGS (no encryption, 0x1 and 0x40; no data descriptor, 0x8; no masked
  directory, 0x2000), compressed with deflate (what the writer uses) or stored (what
  re-zipping tools and hand-made test archives use; reading it is a copy);
- local headers that repeat the central entry exactly (flags, method, time, CRC, sizes,
  name), without extra field but zip64 sizes, laid end to end from offset 0 to the
  central directory: no gap, no overlap (overlapping entries are how non-recursive zip
  bombs multiply), no prepended or appended bytes.

Zip64 sizes (issue 38: raw/samples.csv of a fp32_t2 run passes 2 GiB near 10^7 seeds).
Python's writer gives an entry it expects to pass ZIP64_LIMIT (2^31 - 1 bytes, with 5 %
to spare) a local zip64 field of its two sizes, and the central entry one when they do
pass it; the 32-bit fields then read 0xFFFFFFFF. Exactly that is accepted: one extra
field, id 0x0001, holding the 0xFFFFFFFF fields in order (size, compressed size, then
offset for the central entry), nothing else; its values replace those fields, and local
and central must then agree. Zip64 end records (an archive past 2 GiB compressed, or
65,535 entries) are still refused.

Every refusal is an EvidenceError with one line (exit 3). Names in messages are escaped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import BinaryIO

from specconform.util.errors import EvidenceError

EOCD = struct.Struct("<IHHHHIIH")  # end of central directory record, 22 bytes
CENTRAL = struct.Struct("<IBBBBHHHHIIIHHHHHII")  # central file header, 46 bytes
LOCAL = struct.Struct("<IHHHHHIIIHH")  # local file header, 30 bytes
EOCD_SIG, CENTRAL_SIG, LOCAL_SIG = 0x06054B50, 0x02014B50, 0x04034B50
ZIP64_LOCATOR_SIG = 0x07064B50
ZIP64_EXTRA_ID = 0x0001
FULL = 0xFFFFFFFF  # a 32-bit field whose value is in the zip64 extra field
STORED, DEFLATED = 0, 8
# UTF-8 names (0x800) and deflate's speed hints (0x2, 0x4) are harmless; every other bit
# is a feature the writer never uses (encryption 0x1/0x40, data descriptor 0x8, ...).
ALLOWED_FLAGS = 0x800 | 0x2 | 0x4
FLAG_NAMES = {
    0x1: "encrypted entry",
    0x40: "strongly encrypted entry",
    0x8: "entry with a data descriptor",
    0x2000: "masked central directory",
}
# 10,000 entries (reader.MAX_ENTRIES) with names of a few hundred bytes: about 5 MB.
MAX_CENTRAL_BYTES = 16 << 20


@dataclass(frozen=True)
class Entry:
    """One central-directory entry as stored (raw name bytes)."""

    name: bytes
    flags: int
    method: int
    time: int
    date: int
    crc: int
    compressed: int
    size: int
    offset: int
    data_offset: int = 0  # where its compressed data starts (after the local header)


def shown(name: str | bytes) -> str:
    """A member name fit for a one-line message: control characters escaped."""
    if isinstance(name, bytes):
        name = name.decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in name)
    return text if len(text) <= 200 else text[:197] + "..."


def one_line(error: Exception) -> Exception:
    """`error` with its message made one printable line (names in an archive, and paths,
    can hold line breaks: \\n, \\x85, \\u2028), for the CLI's one-line contract."""
    text = str(error)
    line = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if line != text:
        error.args = (line,)
    return error


def check_structure(fh: BinaryIO, size: int, where: str, max_entries: int) -> list[Entry]:
    """Check the raw zip in `fh` (`size` bytes) of at most `max_entries` entries; return
    its central entries in order."""
    if size < EOCD.size:
        raise EvidenceError(f"{where}: not a readable zip archive (too short)")
    fh.seek(size - EOCD.size)
    sig, disk, cd_disk, here, total, cd_size, cd_offset, comment = EOCD.unpack(fh.read(EOCD.size))
    if sig != EOCD_SIG:
        raise EvidenceError(
            f"{where}: not a readable zip archive (no end record at the end of the file: "
            "a comment or trailing bytes, or not a zip)"
        )
    if comment:  # pragma: no cover (a comment would have moved the record)
        raise EvidenceError(f"{where}: archive comment; evidence archives have none")
    if disk or cd_disk or here != total:
        raise EvidenceError(f"{where}: a multi-disk (spanned) zip; evidence is one file")
    if total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF or _zip64_end(fh, size):
        raise EvidenceError(f"{where}: a zip64 archive; evidence archives are never zip64")
    if total > max_entries:
        raise EvidenceError(f"{where}: {total} entries, more than {max_entries}")
    if cd_offset + cd_size != size - EOCD.size:
        raise EvidenceError(
            f"{where}: the central directory does not end at the end record "
            "(bytes prepended, inserted or appended)"
        )
    if cd_size > MAX_CENTRAL_BYTES:
        raise EvidenceError(
            f"{where}: central directory of {cd_size} bytes, more than {MAX_CENTRAL_BYTES}"
        )
    fh.seek(cd_offset)
    entries = _central_entries(fh.read(cd_size), total, where)
    data_offsets = _check_locals(fh, entries, cd_offset, where)
    return [replace(e, data_offset=data_offsets[e.offset]) for e in entries]


def _zip64_end(fh: BinaryIO, size: int) -> bool:
    at = size - EOCD.size - 20
    if at < 0:
        return False
    fh.seek(at)
    return fh.read(4) == struct.pack("<I", ZIP64_LOCATOR_SIG)


def _central_entries(data: bytes, total: int, where: str) -> list[Entry]:
    entries, pos = [], 0
    while pos < len(data):
        if len(data) - pos < CENTRAL.size:
            raise EvidenceError(f"{where}: truncated central directory entry")
        fields = CENTRAL.unpack_from(data, pos)
        (sig, _cver, _csys, _xver, _res, flags, method, time, date, crc) = fields[:10]
        (compressed, size, name_len, extra_len, comment_len, disk) = fields[10:16]
        offset = fields[18]
        if sig != CENTRAL_SIG:
            raise EvidenceError(f"{where}: corrupt central directory (bad signature)")
        name = data[pos + CENTRAL.size : pos + CENTRAL.size + name_len]
        extra = data[pos + CENTRAL.size + name_len : pos + CENTRAL.size + name_len + extra_len]
        pos += CENTRAL.size + name_len + extra_len + comment_len
        if pos > len(data):
            raise EvidenceError(f"{where}: truncated central directory entry")
        if any(byte < 0x20 or byte == 0x7F for byte in name):
            raise EvidenceError(f"{shown(name)}: file name with a control character")
        _check_flags(flags, name, "central directory")
        if disk:
            raise EvidenceError(f"{shown(name)}: entry on disk {disk}; evidence is one file")
        if comment_len:
            raise EvidenceError(
                f"{shown(name)}: a comment in the central directory; the writer adds none"
            )
        size, compressed, offset = _zip64(
            name, extra, (size, compressed, offset), "the central directory"
        )
        if method not in (STORED, DEFLATED):
            raise EvidenceError(
                f"{shown(name)}: compression method {method} is not stored or deflate"
            )
        entries.append(Entry(name, flags, method, time, date, crc, compressed, size, offset))
    if len(entries) != total:
        raise EvidenceError(
            f"{where}: the end record counts {total} entries, the central directory {len(entries)}"
        )
    return entries


def _zip64(name: bytes, extra: bytes, values: tuple[int, ...], header: str) -> tuple[int, ...]:
    """`values` (size, compressed size[, offset]) with every FULL field read from the
    zip64 extra field, the only extra field allowed, and only when some field is FULL."""
    full = [i for i, v in enumerate(values) if v == FULL]
    if not extra and not full:
        return values
    want = struct.pack("<HH", ZIP64_EXTRA_ID, 8 * len(full))
    if not full or len(extra) != 4 + 8 * len(full) or extra[:4] != want:
        raise EvidenceError(
            f"{shown(name)}: an extra field in {header}; the writer adds none but zip64 sizes"
        )
    out = list(values)
    for i, value in zip(full, struct.unpack(f"<{len(full)}Q", extra[4:]), strict=True):
        out[i] = value
    return tuple(out)


def _check_flags(flags: int, name: bytes, header: str) -> None:
    extra = flags & ~ALLOWED_FLAGS
    if extra:
        bit = extra & -extra
        what = FLAG_NAMES.get(bit, f"entry with flag bit 0x{bit:x}")
        raise EvidenceError(
            f"{shown(name)}: {what} ({header} flags 0x{flags:04x}); the writer sets none"
        )


def _check_locals(fh: BinaryIO, entries: list[Entry], cd_offset: int, where: str) -> dict[int, int]:
    """Check the local headers against `entries`; return each entry's data offset by its
    header offset."""
    expected = 0
    data_offsets: dict[int, int] = {}
    for entry in sorted(entries, key=lambda e: e.offset):
        if entry.offset != expected:
            raise EvidenceError(
                f"{shown(entry.name)}: entry at offset {entry.offset}, expected {expected} "
                "(entries must lie end to end: no gap, overlap or prepended bytes)"
            )
        fh.seek(entry.offset)
        header = fh.read(LOCAL.size)
        if len(header) < LOCAL.size:
            raise EvidenceError(f"{shown(entry.name)}: truncated local header")
        sig, _ver, flags, method, time, date, crc, compressed, size, name_len, extra_len = (
            LOCAL.unpack(header)
        )
        if sig != LOCAL_SIG:
            raise EvidenceError(f"{shown(entry.name)}: no local header at its offset")
        _check_flags(flags, entry.name, "local header")
        name = fh.read(name_len)
        extra = fh.read(extra_len)
        size, compressed = _zip64(entry.name, extra, (size, compressed), "the local header")
        local = (name, flags, method, time, date, crc, compressed, size)
        central = (
            *(entry.name, entry.flags, entry.method, entry.time, entry.date, entry.crc),
            *(entry.compressed, entry.size),
        )
        if local != central:
            field = next(
                label for label, a, b in zip(_FIELDS, local, central, strict=True) if a != b
            )
            raise EvidenceError(
                f"{shown(entry.name)}: local header and central directory differ ({field})"
            )
        data_offsets[entry.offset] = entry.offset + LOCAL.size + name_len + extra_len
        expected = data_offsets[entry.offset] + entry.compressed
    if expected != cd_offset:
        raise EvidenceError(
            f"{where}: {cd_offset - expected} bytes between the last entry and the central "
            "directory"
            if expected < cd_offset
            else f"{where}: the last entry runs into the central directory"
        )
    return data_offsets


_FIELDS = (
    *("name", "flags", "compression method", "time", "date", "CRC"),
    *("compressed size", "size"),
)
