"""Hostile archives, case by case (issue 37.4): every zip feature the writer does not
use is refused by `verify` with one line and exit code 3 (EvidenceError); a path that is
not a regular file is a usage error (exit 2). One case goes through the real CLI.
Protocol files: test_input_bounds.py.
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import pytest

from specconform.evidence import seal
from specconform.evidence.zipcheck import check_structure
from specconform.util.errors import EvidenceError, UsageError
from specconform.verification import verify_archive
from tests.toolkit.cli_helpers import ROOT, assert_cli_refused, run_cli
from tests.toolkit.fixtures import evidence_toy as toy

# --- 37.4: zip features the writer does not use ---------------------------------------------


@pytest.fixture
def archive(tmp_path, monkeypatch):
    toy.install_toy_kind(monkeypatch)
    return seal(toy.build_run_dir(tmp_path / "run"), key=None, sign=False)


def _variant(tmp_path: Path, archive: Path, name: str, edit) -> Path:
    data = bytearray(archive.read_bytes())
    edit(data)
    out = tmp_path / f"{name}.zip"
    out.write_bytes(bytes(data))
    return out


def _central(data: bytes) -> int:
    return data.find(b"PK\x01\x02")


def _eocd(data: bytes) -> int:
    return len(data) - 22


def _set16(data: bytearray, at: int, value: int) -> bytearray:
    data[at : at + 2] = struct.pack("<H", value)
    return data


ZIP_CASES = {
    "encrypted flag, local header": (lambda d: _set16(d, 6, 1), "encrypted entry"),
    "encrypted flag, central header": (
        lambda d: _set16(d, _central(d) + 8, 1),
        "encrypted entry",
    ),
    "strong encryption flag": (lambda d: _set16(d, 6, 0x41), "encrypted entry"),
    "data descriptor, local": (lambda d: _set16(d, 6, 8), "data descriptor"),
    "data descriptor, both": (
        lambda d: (_set16(d, 6, 8), _set16(d, _central(d) + 8, 8)),
        "data descriptor",
    ),
    "multi-disk end record": (lambda d: _set16(d, _eocd(d) + 4, 1), "multi-disk"),
    "central directory on disk 1": (lambda d: _set16(d, _eocd(d) + 6, 1), "multi-disk"),
    "entries per disk differ": (lambda d: _set16(d, _eocd(d) + 8, 1), "multi-disk"),
    "entry on disk 1": (lambda d: _set16(d, _central(d) + 34, 1), "on disk 1"),
    "compression method bzip2": (
        lambda d: (_set16(d, 8, 12), _set16(d, _central(d) + 10, 12)),
        "compression method 12",
    ),
    "local method differs": (lambda d: _set16(d, 8, 0), "differ (compression method)"),
    "local CRC differs": (lambda d: d.__setitem__(14, d[14] ^ 1), "differ (CRC)"),
    "local size differs": (lambda d: d.__setitem__(22, d[22] ^ 1), "differ (size)"),
    "local time differs": (lambda d: _set16(d, 10, 1), "differ (time)"),
    "local name differs": (lambda d: d.__setitem__(30, ord("X")), "differ (name)"),
    "trailing bytes": (lambda d: d.extend(b"\0" * 4), "no end record at the end"),
    "prepended bytes": (lambda d: d.__setitem__(slice(0, 0), b"MZ" * 8), "does not end"),
    "entry count": (
        lambda d: (_set16(d, _eocd(d) + 8, 99), _set16(d, _eocd(d) + 10, 99)),
        "the end record counts 99 entries",
    ),
    "zip64 entry count": (
        lambda d: (_set16(d, _eocd(d) + 8, 0xFFFF), _set16(d, _eocd(d) + 10, 0xFFFF)),
        "zip64",
    ),
    "archive comment": (lambda d: (_set16(d, _eocd(d) + 20, 3), d.extend(b"abc")), "no end"),
}


@pytest.mark.parametrize("case", sorted(ZIP_CASES))
def test_zip_features_the_writer_does_not_use_are_refused(tmp_path, archive, case):
    edit, fragment = ZIP_CASES[case]
    bad = _variant(tmp_path, archive, "bad", edit)
    with pytest.raises(EvidenceError) as info:
        verify_archive(bad)
    message = str(info.value)
    assert info.value.exit_code == 3
    assert len(message.splitlines()) == 1 and fragment in message, message


def test_the_untouched_archive_verifies(archive):
    assert verify_archive(archive).verdict in ("PASS", "FAIL")


def _rezip(tmp_path: Path, archive: Path, name: str, edit_info) -> Path:
    out = tmp_path / name
    with zipfile.ZipFile(archive) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            edit_info(info)
            zout.writestr(info, data)
    return out


def test_extra_fields_and_entry_comments_are_refused(tmp_path, archive):
    def extra(info):
        info.extra = struct.pack("<HH", 0x5455, 1) + b"\0"

    def comment(info):
        info.comment = b"hello"

    for name, edit, fragment in [
        ("extra.zip", extra, "an extra field"),
        ("comment.zip", comment, "a comment"),
    ]:
        with pytest.raises(EvidenceError, match=fragment):
            verify_archive(_rezip(tmp_path, archive, name, edit))


def test_dot_dot_absolute_and_duplicate_names_are_refused(tmp_path, archive):
    top = next(iter(toy.members(archive))).split("/")[0]
    for name, fragment in [
        (f"{top}/../x", "not allowed in evidence"),
        (f"/{top}/x", "not under the archive's top folder"),
        (f"{top}/log.txt", "appears twice"),
        (f"{top}/LOG.txt", "only in case"),
    ]:
        out = tmp_path / "named.zip"
        with zipfile.ZipFile(archive) as zin, zipfile.ZipFile(out, "w") as zout:
            for info in zin.infolist():
                zout.writestr(info, zin.read(info))
            with pytest.warns(UserWarning) if name.endswith("/log.txt") else _no_warning():
                zout.writestr(name, b"x")
        with pytest.raises(EvidenceError, match=fragment):
            verify_archive(out)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_every_shipped_archive_passes_the_structure_check():
    shipped = sorted((ROOT / "docs" / "evidence").rglob("*.zip"))
    assert shipped
    for path in shipped:
        with open(path, "rb") as fh:
            assert check_structure(fh, path.stat().st_size, str(path), 10_000)


def test_an_archive_that_is_not_a_regular_file_is_a_usage_error(tmp_path):
    fifo = tmp_path / "a.zip"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path, Path("/dev/zero")):
        with pytest.raises(UsageError, match="not a regular file"):
            verify_archive(path)


def test_cli_verify_refuses_a_local_encrypted_flag_with_exit_3(tmp_path, archive):
    bad = _variant(tmp_path, archive, "enc", lambda d: _set16(d, 6, 1))
    assert_cli_refused(run_cli("verify", bad, "--skip-signature"), 3, "encrypted entry")
