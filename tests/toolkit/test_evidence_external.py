"""`--max-archive-size` (issue 14, part 4): files that would push an archive past the cap
are hashed, listed in the signed external/MANIFEST.json and kept beside the archive;
`verify` checks them when present (a wrong digest is tampering, exit 3), says which are
absent and which evidence cannot be recomputed without them."""

from __future__ import annotations

import json
import secrets
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import verify_command
from specconform.evidence import seal
from specconform.evidence.external import MANIFEST_NAME, parse_size
from specconform.evidence.sha256sums import sha256_hex
from specconform.util.errors import EvidenceError, UsageError
from specconform.verification import verify_archive
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.fixtures import evidence_toy as toy

RUN_ID = "toy-0123abcd-20250101T000000"
CAP = 40_000  # bytes: the toy archive's other files take about 4 kB


# toy_kind and keys: tests/toolkit/conftest.py.
pytestmark = pytest.mark.usefixtures("toy_kind")


def _big_run(tmp_path: Path) -> Path:
    """The toy run with a raw file of ~100 kB of random hex (deflate cannot shrink it
    below ~50 kB) and a small plot that fits."""
    run_dir = toy.build_run_dir(tmp_path / "runs")
    (run_dir / "raw" / "trace.txt").write_text(secrets.token_hex(50_000))
    (run_dir / "plots").mkdir()
    (run_dir / "plots" / "small.svg").write_text("<svg/>")
    return run_dir


def _members(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as zf:
        return {n.split("/", 1)[1]: zf.read(n) for n in zf.namelist()}


@pytest.mark.parametrize(
    ("text", "size"),
    [("25MB", 25 * 10**6), ("500KiB", 500 * 1024), ("1000000", 10**6), ("1.5 GB", 15 * 10**8)],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["25XB", "-3MB", "0", "MB", "1e6"])
def test_bad_sizes_are_one_usage_error(text):
    with pytest.raises(UsageError, match="--max-archive-size"):
        parse_size(text)


def test_oversized_file_moves_beside_the_archive_and_verifies(tmp_path, keys):
    run_dir = _big_run(tmp_path)
    trace = (run_dir / "raw" / "trace.txt").read_bytes()
    archive = seal(run_dir, key=keys[0], sign=True, max_size=CAP)
    assert archive.stat().st_size <= CAP
    members = _members(archive)
    assert "raw/trace.txt" not in members and "plots/small.svg" in members
    manifest = json.loads(members[MANIFEST_NAME])
    assert manifest["files"] == [
        {"path": "raw/trace.txt", "size": len(trace), "sha256": sha256_hex(trace)}
    ]
    beside = archive.with_name(f"{RUN_ID}.external") / "raw" / "trace.txt"
    assert beside.read_bytes() == trace
    # The signature covers the listing: the attestation names the manifest's digest.
    statement = json.loads(
        __import__("base64").b64decode(json.loads(members["attestation.dsse.json"])["payload"])
    )
    assert MANIFEST_NAME in {s["name"] for s in statement["subject"]}  # fmt: skip
    report = verify_archive(archive, keys[1])
    assert report.trusted and report.tests_recomputed == 4
    assert any("1 file(s) beside the archive" in line for line in report.lines())


def test_no_cap_or_a_cap_that_fits_moves_nothing(tmp_path):
    archive = seal(_big_run(tmp_path), key=None, sign=False, max_size=10**7)
    assert "raw/trace.txt" in _members(archive) and MANIFEST_NAME not in _members(archive)
    assert not archive.with_name(f"{RUN_ID}.external").exists()


def test_a_changed_external_file_is_tampering(tmp_path, keys):
    archive = seal(_big_run(tmp_path), key=keys[0], sign=True, max_size=CAP)
    beside = archive.with_name(f"{RUN_ID}.external") / "raw" / "trace.txt"
    beside.write_text(beside.read_text()[:-1] + "x")
    with pytest.raises(EvidenceError, match="does not match its size and sha256"):
        verify_archive(archive, keys[1])
    result = CliRunner().invoke(verify_command, [str(archive), "--pubkey", str(keys[1])])
    assert result.exit_code == 3 and len(result.stderr.splitlines()) == 1


def test_absent_external_raw_file_is_named_and_skip_external_says_not_recomputed(tmp_path):
    # The toy kind recomputes from raw/counts.json: move that one out too.
    run_dir = _big_run(tmp_path)
    counts = json.loads((run_dir / "raw" / "counts.json").read_text())
    counts["padding"] = secrets.token_hex(50_000)  # the toy kind reads groups/acceptance
    (run_dir / "raw" / "counts.json").write_text(json.dumps(counts))
    archive = seal(run_dir, key=None, sign=False, max_size=CAP)
    listed = {f["path"] for f in json.loads(_members(archive)[MANIFEST_NAME])["files"]}
    assert listed == {"raw/trace.txt", "raw/counts.json"}
    shutil.rmtree(archive.with_name(f"{RUN_ID}.external"))
    with pytest.raises(EvidenceError, match=r"raw/counts.json, raw/trace.txt not found"):
        verify_archive(archive)
    report = verify_archive(archive, skip_external=True)
    assert report.tests_recomputed == 0 and report.not_recomputed
    text = "\n".join(report.lines())
    assert "ABSENT: raw/counts.json, raw/trace.txt" in text
    assert "recomputed: NOT DONE" in text and "raw/counts.json" in text
    cli = CliRunner().invoke(verify_command, [str(archive), "--skip-signature", "--skip-external"])
    assert cli.exit_code == 0 and "NOT DONE" in cli.stdout


def test_a_cap_below_the_core_files_refuses_and_restores_the_run(tmp_path):
    run_dir = _big_run(tmp_path)
    before = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    with pytest.raises(UsageError, match="give a larger size"):
        seal(run_dir, key=None, sign=False, max_size=500)
    after = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    assert not run_dir.with_name(run_dir.name + ".zip").exists()
    assert not run_dir.with_name(run_dir.name + ".external").exists()
    assert "raw/trace.txt" in after and MANIFEST_NAME not in after
    assert set(before) <= set(after) | {"UNSIGNED", "SHA256SUMS"}


def test_cli_bad_size_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = run_cli(
        "run", ROOT / "protocols" / "quadrature.yaml", "--no-sign", "--out", out,
        "--max-archive-size", "25XB",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--max-archive-size" in done.stderr
    assert not out.exists()


def test_a_limit_no_archive_can_meet_is_refused_before_the_run(tmp_path):
    """Issue 37: `--max-archive-size 1KB` was refused only after the whole run (leaving
    .inprogress). The protocol file and the fixed members alone exceed 1 kB, so the
    limit is refused before anything runs; a limit above that floor is not."""
    out = tmp_path / "out"
    args = ("run", ROOT / "protocols" / "quadrature.yaml", "--no-sign", "--out", out)
    done = run_cli(*args, "--max-archive-size", "1KB")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "raise the limit" in done.stderr
    assert not out.exists()  # nothing ran, nothing written
    # The floor is a lower bound: a real archive of this protocol is larger than it.
    from specconform.protocol.load import load_protocol
    from specconform.runner.assemble import check_archive_floor

    loaded = load_protocol(ROOT / "protocols" / "quadrature.yaml")
    check_archive_floor(loaded, 4_000)  # above the floor (about 3.4 kB): no refusal
    with pytest.raises(UsageError, match="raise the limit"):
        check_archive_floor(loaded, 1_500)


def test_cli_run_keeps_the_moved_files_beside_the_archive(tmp_path):
    """`run --max-archive-size`: the staged run's external folder is renamed with it to
    OUT/<run-id>.external, and `verify` reads it from there. Three small quadrature
    cases at grid 64: the archive takes ~8.3 kB, ~6.5 kB without its three raw files,
    so a 7.5 kB cap moves one or more of them out."""
    import yaml

    data = yaml.safe_load((ROOT / "protocols" / "quadrature.yaml").read_text())
    data.update(name="quadrature_small", cases=[dict(c, grid=64) for c in data["cases"][:3]])
    protocol = tmp_path / "quadrature_small.yaml"
    protocol.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    done = run_cli(
        "run", protocol, "--no-sign", "--out", out, "--max-archive-size", "7.5kB",
        env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (archive,) = out.glob("*.zip")
    beside = archive.with_name(archive.name[: -len(".zip")] + ".external")
    moved = sorted(p.relative_to(beside).as_posix() for p in beside.rglob("*.json"))
    assert moved and all(m.startswith("raw/quadrature/") for m in moved)
    assert archive.stat().st_size <= 7_500 and not list(out.glob(".partial-*"))
    ok = run_cli("verify", archive, "--skip-signature")
    assert ok.returncode == 0 and "match external/MANIFEST.json" in ok.stdout
    (beside / moved[0]).unlink()
    gone = run_cli("verify", archive, "--skip-signature")
    assert gone.returncode == 3 and moved[0] in gone.stderr
