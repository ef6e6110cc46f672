"""Hostile archives: zip bombs, non-file entries, duplicates and escaping names are
refused by `verify` and `report` with exit 3 and one line, in bounded memory.

The bombs are written by hand (a raw deflate stream of zeros made of one repeated
full-flush block, so a 4 GB entry costs a few MB and no 4 GB of compression work); the
reader must refuse them from the central directory or after little inflation.
"""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import report_command, verify_command
from specconform.evidence import reader, seal
from specconform.evidence.reader import MEMORY_BOUND_BYTES
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.fixtures import evidence_toy as toy

RUN_ID = "toy-0123abcd-20250101T000000"
MIB = 1 << 20


# toy_kind: tests/toolkit/conftest.py.
pytestmark = pytest.mark.usefixtures("toy_kind")


@pytest.fixture
def unsigned(tmp_path):
    return seal(toy.build_run_dir(tmp_path / "unsigned"), key=None, sign=False)


@lru_cache(maxsize=4)
def _zeros_deflate(n_mib: int) -> tuple[bytes, int]:
    """(raw deflate stream, crc32) of n_mib MiB of zeros. After a full flush the
    compressor's state is reset, so every 1 MiB block compresses to the same bytes."""
    block = bytes(MIB)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    assert again == first
    stream = first * n_mib + comp.flush(zlib.Z_FINISH)
    # The true CRC of the zeros, what a careful attacker would write, so that nothing but
    # the bounds can stop the bomb. crc32 of 4 GB costs seconds, so the two sizes used
    # here are precomputed (zlib.crc32 chained over n_mib blocks of 1 MiB of zeros).
    crc = _ZEROS_CRC.get(n_mib)
    if crc is None:
        crc = 0
        for _ in range(n_mib):
            crc = zlib.crc32(block, crc)
    return stream, crc


_ZEROS_CRC = {1907: 0x492EEB15, 3814: 0xCBC47ACA}


def _write_zip(path: Path, entries: list[tuple[str, bytes, int, int, int]]) -> Path:
    """A zip of (name, deflate data, crc, declared size, external_attr) entries,
    written field by field: the sizes are whatever the caller declares."""
    body, central = bytearray(), bytearray()
    for name, data, crc, size, attr in entries:
        raw = name.encode()
        offset = len(body)
        body += (
            struct.pack(
                "<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(data), size, len(raw), 0
            )
            + raw
            + data
        )
        central += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                (3 << 8) | 20,
                20,
                0,
                8,
                0,
                0x21,
                crc,
                len(data),
                size,
                len(raw),
                0,
                0,
                0,
                0,
                attr,
                offset,
            )
            + raw
        )
    eocd = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(body), 0
    )
    path.write_bytes(bytes(body + central + eocd))
    return path


def _bomb(tmp_path: Path, n_mib: int, declared: int | None = None) -> Path:
    stream, crc = _zeros_deflate(n_mib)
    size = n_mib * MIB if declared is None else declared
    return _write_zip(
        tmp_path / f"bomb-{n_mib}.zip",
        [(f"{RUN_ID}/raw/samples.csv", stream, crc, size, 0o100644 << 16)],
    )


def _assert_refused(result, *fragments: str) -> None:
    assert result.exit_code == 3, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _verify(archive: Path):
    return CliRunner().invoke(verify_command, [str(archive), "--skip-signature"])


def _report(archive: Path):
    return CliRunner().invoke(report_command, [str(archive)])


# --- bombs -------------------------------------------------------------------------------


@pytest.mark.parametrize("n_mib", [1907, 3814])  # 2 GB and 4 GB of zeros
def test_zip_bomb_is_refused_by_ratio_before_inflating(tmp_path, n_mib):
    bomb = _bomb(tmp_path, n_mib)
    assert bomb.stat().st_size < 8 * MIB
    _assert_refused(_verify(bomb), "compression ratio above")
    _assert_refused(_report(bomb), "compression ratio above")


def test_bomb_declaring_a_small_size_is_bounded_by_what_it_declares(tmp_path):
    # The reader inflates in chunks and stops as soon as more than the declared size
    # comes out (evidence.members.inflate): exit 3 after one chunk, not 4 GB.
    _assert_refused(
        _verify(_bomb(tmp_path, 3814, declared=1000)), "inflates past its declared size of 1000"
    )


def test_entries_past_the_inflated_size_cap_are_refused(tmp_path, unsigned, monkeypatch):
    # Ordinary (ratio ~2:1) data beyond the cap on inflated bytes, with the cap lowered
    # to 2 MiB so that the test stays small: refused from the central directory.
    monkeypatch.setattr(reader, "MAX_TOTAL_BYTES", 2 * MIB)
    noise = os.urandom(MIB).hex().encode() + b"\n"  # 2 MiB + 1 byte of hex text
    _assert_refused(
        _verify(_with_entry(tmp_path, unsigned, f"{RUN_ID}/raw/big.csv", noise)), "evidence bound"
    )


def test_verify_of_the_4gb_bomb_stays_under_the_memory_bound(tmp_path):
    bomb = _bomb(tmp_path, 3814)
    probe = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'specconform', 'verify', sys.argv[1],"
        " '--skip-signature'], capture_output=True, text=True)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(p.stderr, end='')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(bomb)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    first, *stderr = done.stdout.splitlines()
    code, max_rss_kib = map(int, first.split())
    assert code == 3 and len(stderr) == 1 and "compression ratio" in stderr[0], done.stdout
    # Measured: about 140 MiB (Python, click, numpy/pandas imports); the bound is 512 MiB
    # (archives near the inflated-size cap: see the measurements in evidence/reader.py).
    assert max_rss_kib * 1024 < MEMORY_BOUND_BYTES, max_rss_kib


# --- entry types, duplicates, names -------------------------------------------------------


def _with_entry(
    tmp_path: Path, archive: Path, name: str, data: bytes, attr: int | None = None
) -> Path:
    out = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.create_system = 3
        if attr is not None:
            info.external_attr = attr
        with pytest.warns(UserWarning) if name in zin.namelist() else _nothing():
            zout.writestr(info, data)
    return out


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _retyped(tmp_path: Path, archive: Path, member: str, attr: int) -> Path:
    """`member` re-typed (same bytes, so every digest still matches)."""
    out = tmp_path / "retyped.zip"
    with zipfile.ZipFile(archive) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename == f"{RUN_ID}/{member}":
                info.external_attr = attr
            zout.writestr(info, zin.read(info))
    return out


DIR_ATTR = (stat.S_IFDIR | 0o755) << 16 | 0x10


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("empty directory", "a directory entry"),
        ("directory with data", "a directory entry"),
        ("symlink", "a symlink entry"),
        ("character device", "a device entry"),
        ("block device", "a device entry"),
        ("fifo", "a fifo entry"),
        ("duplicate", "appears twice"),
        ("absolute path", "not under the archive's top folder"),
        ("dot-dot path", "not allowed in evidence"),
        ("second top folder", "one top folder"),
        ("file at the root", "not under the archive's top folder"),
    ],
)
def test_hostile_entries_are_refused(tmp_path, unsigned, case, fragment):
    log = f"{RUN_ID}/log.txt"
    build = {
        "empty directory": lambda: _with_entry(
            tmp_path, unsigned, f"{RUN_ID}/extra/", b"", DIR_ATTR
        ),
        "directory with data": lambda: _with_entry(
            tmp_path, unsigned, f"{RUN_ID}/extra/", bytes(MIB), DIR_ATTR
        ),
        "symlink": lambda: _retyped(tmp_path, unsigned, "log.txt", (stat.S_IFLNK | 0o777) << 16),
        "character device": lambda: _retyped(
            tmp_path, unsigned, "log.txt", (stat.S_IFCHR | 0o644) << 16
        ),
        "block device": lambda: _retyped(
            tmp_path, unsigned, "log.txt", (stat.S_IFBLK | 0o644) << 16
        ),
        "fifo": lambda: _retyped(tmp_path, unsigned, "log.txt", (stat.S_IFIFO | 0o644) << 16),
        "duplicate": lambda: _with_entry(tmp_path, unsigned, log, b"second log\n"),
        "absolute path": lambda: _with_entry(tmp_path, unsigned, f"/{RUN_ID}/x", b"x"),
        "dot-dot path": lambda: _with_entry(tmp_path, unsigned, f"{RUN_ID}/../x", b"x"),
        "second top folder": lambda: _with_entry(tmp_path, unsigned, "other/x", b"x"),
        "file at the root": lambda: _with_entry(tmp_path, unsigned, "x", b"x"),
    }
    hostile = build[case]()
    _assert_refused(_verify(hostile), fragment)
    _assert_refused(_report(hostile), fragment)


def test_the_untouched_archive_still_verifies(unsigned):
    # The control for the cases above: the same archive without the hostile entry.
    result = _verify(unsigned)
    assert result.exit_code == 0, result.output
