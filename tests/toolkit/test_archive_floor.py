"""The pre-run archive floor (specconform.runner.archive_floor, issue 37 part 3): a
--max-archive-size below what every archive of the protocol keeps is refused before any
work, with the estimate in the line; the floor is a true lower bound (never above a real
archive), so no cap that could be met is refused. Deterministic: no alpha or power.
Negative control: a cap at the floor passes the check, and real runs' archives are
measured against it."""

from __future__ import annotations

import re
import zipfile

import pytest

from specconform.protocol.load import load_protocol
from specconform.runner.archive_floor import archive_floor, check_archive_floor
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.test_fault_injection import _protocol


@pytest.mark.parametrize("signed", [False, True])
def test_the_floor_is_below_a_real_archive(tmp_path, signed):
    path = _protocol(tmp_path, fault="raises", after=99)  # no fault strikes
    out = tmp_path / "out"
    sign = ["--key", _key(tmp_path)] if signed else ["--no-sign"]
    done = run_cli("run", path, "--out", out, *sign)
    assert done.returncode == 0, done.stderr[-2000:]
    (archive,) = out.glob("*.zip")
    with zipfile.ZipFile(archive) as zf:
        top = zf.namelist()[0].split("/")[0]
        kept = sum(  # what a cap cannot move out: every member but raw/ and plots/
            i.compress_size + 76 + 2 * len(i.filename.encode())
            for i in zf.infolist()
            if not i.filename.split("/", 1)[1].startswith(("raw/", "plots/"))
        )
    floor = archive_floor(load_protocol(path), top, signed=signed)
    assert floor.total <= kept <= archive.stat().st_size
    # finer than the earlier bound (deflated protocol file + 1,024 bytes)
    import zlib

    assert floor.total > int(0.9 * len(zlib.compress(path.read_bytes(), 9))) + 1024


def _key(tmp_path):
    done = run_cli("keygen", "--out", tmp_path / "signing")
    assert done.returncode == 0, done.stderr
    return tmp_path / "signing.key"


def test_a_cap_below_the_floor_is_refused_before_the_run_naming_the_estimate(tmp_path):
    path = _protocol(tmp_path, fault="raises", after=99)
    loaded = load_protocol(path)
    floor = check_archive_floor(loaded, 10**9)  # negative control: a large cap passes
    assert check_archive_floor(loaded, floor.total) == floor  # the floor itself passes
    with pytest.raises(UsageError, match=f"takes at least {floor.total} bytes"):
        check_archive_floor(loaded, floor.total - 1)
    out = tmp_path / "out"
    cap = str(floor.total - 1)
    done = run_cli("run", path, "--out", out, "--no-sign", "--max-archive-size", cap)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert re.search(r"takes at least \d+ bytes \(\d+ protocol, \d+ zip headers", done.stderr)
    assert not out.exists()  # nothing ran, nothing written


def test_the_floor_counts_the_run_id_and_the_signature():
    loaded = load_protocol(ROOT / "protocols" / "quadrature.yaml")
    short, long = (archive_floor(loaded, run_id, signed=False) for run_id in ("a", "a" * 60))
    assert long.headers - short.headers == 2 * 59 * 11  # 11 members, each name twice
    signed = archive_floor(loaded, "a", signed=True)
    assert signed.digests - short.digests == 10 * 32 + 64
