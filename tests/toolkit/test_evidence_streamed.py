"""Streamed members (issue 38 part 2): `verify` recomputes from a raw/samples.csv larger
than what the reader may hold, without holding it; what no consumer streams stays under
the held bound; entries whose data hides bytes, lies about its size or ends early are
refused (exit 3, one line) by the reader's own inflate (evidence.members.inflate).

The archive is the committed ci_gate example (a real fixed-N distribution run, 0.52 MB
of samples.csv); the bounds are lowered so that its samples.csv is past them, which
stands for a 10^6-seed run's ~240 MB past the real 48 MiB (measured on such archives:
docs/gpu-runs.md, "Streamed reduction").
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import report_command, verify_command
from specconform.evidence import members, read_archive
from specconform.util.errors import EvidenceError
from tests.toolkit.cli_helpers import ROOT

CI_GATE = ROOT / "docs/evidence/pr-example/ci_gate-eba63360-29cc5a7d.zip"
FP32_SCHEMA1 = ROOT / "docs/evidence/fp32_t2-96c34d54-41ee4c6a.zip"
SAMPLES = "raw/samples.csv"
KIB = 1 << 10


def _verify(archive: Path):
    return CliRunner().invoke(verify_command, [str(archive), "--skip-signature"])


def _refused(result, fragment: str) -> None:
    assert result.exit_code == 3, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.fixture
def small_bounds(monkeypatch):
    """Members above 64 KiB streamed, 400 KiB held at most: ci_gate's samples.csv
    (521,421 bytes) is past the held bound, everything else of the archive fits."""
    monkeypatch.setattr(members, "HELD_MEMBER_BYTES", 64 * KIB)
    monkeypatch.setattr(members, "MAX_HELD_BYTES", 400 * KIB)


def test_verify_streams_samples_past_the_held_bound(small_bounds):
    with zipfile.ZipFile(CI_GATE) as z:
        size = next(i.file_size for i in z.infolist() if i.filename.endswith(SAMPLES))
    assert size > members.MAX_HELD_BYTES
    contents = read_archive(CI_GATE)
    assert isinstance(contents.files.source(SAMPLES), members.Member)  # left in the zip
    result = _verify(CI_GATE)
    assert result.exit_code == 0, result.output
    assert "tests and the verdict (PASS) match the archive" in result.stdout
    # The same lines as with the real bounds, where the reader holds everything.
    with pytest.MonkeyPatch.context() as m:
        m.setattr(members, "HELD_MEMBER_BYTES", 1 << 20)
        m.setattr(members, "MAX_HELD_BYTES", 48 << 20)
        assert _verify(CI_GATE).stdout == result.stdout
    # Negative control: reading it whole (what verify did before) passes the bound.
    with pytest.raises(EvidenceError, match="evidence bound for members held in memory"):
        read_archive(CI_GATE).files[SAMPLES]


def test_a_kind_that_reads_samples_whole_is_refused_past_the_bound(monkeypatch):
    # The schema-1 evaluator reads samples.csv at once (1.47 MB): with 1 MiB held at
    # most it cannot, and says so in one line, instead of holding it anyway.
    monkeypatch.setattr(members, "MAX_HELD_BYTES", 1 << 20)
    _refused(_verify(FP32_SCHEMA1), "evidence bound for members held in memory")
    monkeypatch.setattr(members, "MAX_HELD_BYTES", 48 << 20)
    assert _verify(FP32_SCHEMA1).exit_code == 0


def test_report_reads_a_streamed_archive(small_bounds):
    result = CliRunner().invoke(report_command, [str(CI_GATE)])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout


def test_a_streamed_member_is_checked_again_as_it_is_read(tmp_path, small_bounds):
    copy = tmp_path / CI_GATE.name
    copy.write_bytes(CI_GATE.read_bytes())
    contents = read_archive(copy)
    member = contents.files.source(SAMPLES)
    with member.open() as fh:  # the control: read back whole, the same bytes
        assert fh.read() == zipfile.ZipFile(copy).read(f"{contents.top}/{SAMPLES}")
    wrong = dataclasses.replace(member, sha256="0" * 64)
    with pytest.raises(EvidenceError, match="changed since it was first read"):
        with wrong.open() as fh:
            fh.read()
    os.utime(copy, ns=(0, 0))  # the archive file is not the one first read
    with pytest.raises(EvidenceError, match="changed since it was first read"):
        member.open()


# --- entries whose data does not match what their headers declare ------------------------


def _rewritten(
    tmp_path: Path,
    name: str,
    data: bytes | None = None,
    crc: int | None = None,
    size: int | None = None,
    *,
    local_extra: bytes | None = None,
    central_extra: bytes | None = None,
    central_full: bool = True,
) -> Path:
    """CI_GATE with member `name`'s raw deflate data, CRC and size replaced (None: kept),
    and with the given extra fields (the sizes then read 0xFFFFFFFF in that header,
    unless not `central_full`); every other entry copied as stored, headers written
    field by field."""
    out = tmp_path / "hostile.zip"
    body, central = bytearray(), bytearray()
    with zipfile.ZipFile(CI_GATE) as z, open(CI_GATE, "rb") as fh:
        infos = z.infolist()
        for info in infos:
            raw = info.filename.encode()
            fh.seek(info.header_offset + 30 + len(raw))
            stored, c, n = fh.read(info.compress_size), info.CRC, info.file_size
            lx = cx = b""
            if info.filename.endswith("/" + name):
                stored = stored if data is None else data
                c, n = (c if crc is None else crc), (n if size is None else size)
                lx, cx = local_extra or b"", central_extra or b""
            full = 0xFFFFFFFF
            offset = len(body)
            body += struct.pack(
                "<IHHHHHIIIHH",
                *(0x04034B50, 45 if lx else 20, 0, 8, 0, 0x21, c),
                *((full, full) if lx else (len(stored), n)),
                *(len(raw), len(lx)),
            )
            body += raw + lx + stored
            central += struct.pack(
                "<IHHHHHHIIIHHHHHII",
                *(0x02014B50, (3 << 8) | 20, 20, 0, 8, 0, 0x21, c),
                *((full, full) if cx and central_full else (len(stored), n)),
                *(len(raw), len(cx), 0, 0, 0, 0o100644 << 16, offset),
            )
            central += raw + cx
    eocd = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(infos), len(infos), len(central), len(body), 0
    )
    out.write_bytes(bytes(body + central + eocd))
    return out


def _zip64(size: int, compressed: int) -> bytes:
    return struct.pack("<HHQQ", 1, 16, size, compressed)


def _deflate(data: bytes) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush()


@pytest.fixture(scope="module")
def log_text() -> bytes:
    with zipfile.ZipFile(CI_GATE) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/log.txt")))


def test_the_rewriter_alone_changes_nothing(tmp_path, log_text):
    # The control for the cases below: the same member rewritten faithfully verifies.
    same = _rewritten(tmp_path, "log.txt", _deflate(log_text), zlib.crc32(log_text), len(log_text))
    assert _verify(same).exit_code == 0


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("hidden bytes after the deflate stream", "bytes after the end of its deflate data"),
        ("declared size short of the data", "inflates past its declared size"),
        ("declared size past the data", "not the"),
        ("corrupted data", "corrupt deflate data"),
    ],
)
def test_entry_data_that_differs_from_its_headers_is_refused(tmp_path, log_text, case, fragment):
    good = _deflate(log_text)
    crc, n = zlib.crc32(log_text), len(log_text)
    data, crc, size = {
        # zipfile stops at the declared size and ignores what follows the stream
        "hidden bytes after the deflate stream": (good + _deflate(b"hidden"), crc, n),
        # the CRC of the prefix, so that only the size check can refuse it
        "declared size short of the data": (good, zlib.crc32(log_text[:100]), 100),
        "declared size past the data": (good, crc, n + 100),
        "corrupted data": (b"\xff" * len(good), crc, n),
    }[case]
    hostile = _rewritten(tmp_path, "log.txt", data, crc, size)
    _refused(_verify(hostile), fragment)
    _refused(CliRunner().invoke(report_command, [str(hostile)]), fragment)


# --- zip64 sizes: what the writer gives a member past 2 GiB (10^7 seeds of fp32_t2) ----------


def _samples_sizes() -> tuple[int, int]:
    with zipfile.ZipFile(CI_GATE) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(SAMPLES))
        return info.file_size, info.compress_size


def test_zip64_sizes_in_both_headers_are_read(tmp_path):
    # The layout of a member past ZIP64_LIMIT, on a small one: 0xFFFFFFFF in both headers,
    # the sizes in each zip64 field; verify reads it as the original.
    size, compressed = _samples_sizes()
    extra = _zip64(size, compressed)
    zip64 = _rewritten(tmp_path, SAMPLES, local_extra=extra, central_extra=extra)
    result = _verify(zip64)
    assert result.exit_code == 0, result.output
    # the same lines but the first (the archive's path)
    assert result.stdout.splitlines()[1:] == _verify(CI_GATE).stdout.splitlines()[1:]


def test_what_zipfile_writes_with_zip64_is_read(tmp_path):
    # Python's writer itself, as seal uses it, for a member it expects to pass
    # ZIP64_LIMIT (force_zip64: a local zip64 field; the central entry none, since the
    # member does not actually pass it).
    out = tmp_path / "zip64.zip"
    with zipfile.ZipFile(CI_GATE) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)  # before zout.open, which rewrites info's offset
            with zout.open(info, "w", force_zip64=info.filename.endswith(SAMPLES)) as dest:
                dest.write(data)
    local_extra = out.read_bytes().count(struct.pack("<HH", 1, 16))
    assert local_extra == 1
    result = _verify(out)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("local size differs", "differ (size)"),
        ("zip64 field longer than its 0xFFFFFFFF fields", "an extra field"),
        ("another extra field after it", "an extra field"),
        ("zip64 field without 0xFFFFFFFF", "an extra field"),
    ],
)
def test_zip64_fields_that_disagree_are_refused(tmp_path, case, fragment):
    size, compressed = _samples_sizes()
    good = _zip64(size, compressed)
    local, central = {
        "local size differs": (_zip64(size + 1, compressed), good),
        "zip64 field longer than its 0xFFFFFFFF fields": (
            good,
            struct.pack("<HHQQQ", 1, 24, size, compressed, 7),
        ),
        "another extra field after it": (good + struct.pack("<HH", 0x5455, 1) + b"\0", good),
        "zip64 field without 0xFFFFFFFF": (good, None),
    }[case]
    hostile = _rewritten(
        tmp_path,
        SAMPLES,
        local_extra=local,
        central_extra=central or good,
        central_full=central is not None,  # else the real sizes beside a zip64 field
    )
    _refused(_verify(hostile), fragment)


def test_tests_csv_with_a_detail_past_csv_field_limit_is_read():
    # At 10^6 seeds t3's detail (one JSON string per stratum) is ~0.25 MB, past csv's
    # default field limit of 128 KiB: verify crashed there before reading any stream.
    import csv

    from specconform.evidence.results_io import read_tests_csv

    detail = '"{""strata"": ""' + "x" * (300 << 10) + '""}"'
    data = (
        "test,role,statistic,df,pvalue,n,alpha,passed,status,adjusted_pvalue,detail\n"
        f"t3_async,primary,1.0,2.0,0.5,10,0.01,true,PASS,0.5,{detail}\n"
    ).encode()
    before = csv.field_size_limit()
    (row,) = read_tests_csv(data)
    assert row["test"] == "t3_async" and row["pvalue"] == 0.5
    assert csv.field_size_limit() == before  # the process-wide limit is put back
    with pytest.raises(csv.Error):  # the control: csv's own limit refuses the field
        list(csv.reader([data.decode().splitlines()[1]]))


def test_a_failing_archive_past_the_bound_verifies_and_says_what_is_not_diagnosed(
    tmp_path, monkeypatch
):
    # A failing run (one out-of-support t3 planted): verify still recomputes it streamed
    # (exit 0: the evidence is valid); its diagnosis, which reads samples.csv per seed,
    # names the counts but no offenders instead of failing the command.
    from tests.toolkit.fixtures.failing_run import out_of_support_archive

    archive, planted = out_of_support_archive(tmp_path, "ci_gate-00000000-20250101T000000")
    control = _verify(archive)  # the real bounds: the offender is listed
    assert control.exit_code == 0, control.output
    assert f"seed {planted.seed}" in control.stdout
    with zipfile.ZipFile(archive) as z:
        sizes = {i.filename.split("/", 1)[1]: i.file_size for i in z.infolist()}
    rest = sum(sizes.values()) - sizes[SAMPLES]
    monkeypatch.setattr(members, "HELD_MEMBER_BYTES", 16 * KIB)
    monkeypatch.setattr(members, "MAX_HELD_BYTES", rest + sizes[SAMPLES] // 2)
    result = _verify(archive)
    assert result.exit_code == 0, result.output
    assert "verdict (FAIL) match the archive" in result.stdout
    assert "offenders not listed" in result.stdout and f"seed {planted.seed}" not in result.stdout
