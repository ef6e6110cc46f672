"""Sealing: SHA256SUMS, the signed attestation, the UNSIGNED marker, reproducible zip
bytes, signing-key resolution, keygen, and the environment/volatile manifests."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from specconform.cli.evidence import keygen_command, write_key_pair
from specconform.evidence import (
    compare_archives,
    environment_manifest,
    resolve_signing_key,
    seal,
    volatile_facts,
    write_sha256sums,
)
from specconform.evidence.signing import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, pae
from specconform.runner.archive_floor import FIXED_MEMBERS
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.fixtures import evidence_toy as toy

RUN_ID = "toy-0123abcd-20250101T000000"


@pytest.fixture
def keys(tmp_path):
    (tmp_path / "keys").mkdir()
    return write_key_pair(tmp_path / "keys" / "test")


def _sealed(parent: Path, key: Path | None, **kwargs) -> Path:
    run_dir = toy.build_run_dir(parent, **kwargs)
    return seal(run_dir, key=key, sign=key is not None)


def _unzip(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(dest)
    return dest / RUN_ID


# --- layout --------------------------------------------------------------------------


def test_seal_writes_a_reproducible_zip_layout(tmp_path, keys):
    zip_path = _sealed(tmp_path / "a", keys[0])
    assert zip_path == tmp_path / "a" / f"{RUN_ID}.zip"
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names == sorted(names)
    assert all(n.startswith(f"{RUN_ID}/") and not n.endswith("/") for n in names)
    # Every member the size floor counts on (runner.archive_floor), the attestation
    # and this kind's raw counts.
    members = {n.split("/", 1)[1] for n in names}
    assert members >= {*FIXED_MEMBERS, "attestation.dsse.json", "raw/counts.json"}
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.external_attr >> 16 == 0o100644
        assert info.compress_type == zipfile.ZIP_DEFLATED
        assert info.create_system == 3 and info.extra == b""


@pytest.mark.parametrize("signed", [True, False])
def test_sha256sum_c_passes_after_unzip(tmp_path, keys, signed):
    zip_path = _sealed(tmp_path / "a", keys[0] if signed else None)
    root = _unzip(zip_path, tmp_path / "unzipped")
    done = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = [line.split("  ", 1)[1] for line in (root / "SHA256SUMS").read_text().splitlines()]
    every_file = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert listed == sorted(set(every_file) - {"SHA256SUMS", "attestation.dsse.json"})
    assert ("UNSIGNED" in listed) is not signed


def test_attestation_is_a_dsse_in_toto_statement_over_every_file(tmp_path, keys):
    root = _unzip(_sealed(tmp_path / "a", keys[0]), tmp_path / "unzipped")
    envelope = json.loads((root / "attestation.dsse.json").read_bytes())
    assert envelope["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    payload = base64.b64decode(envelope["payload"])
    statement = json.loads(payload)
    assert statement["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["predicate"] == {
        "run_id": RUN_ID,
        "protocol_hash": "ab" * 32,
        "verdict": "PASS",
    }
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    files = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and p.name != "attestation.dsse.json"
    }
    assert subjects == files and "SHA256SUMS" in subjects

    public = serialization.load_pem_public_key(keys[1].read_bytes())
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (signature,) = envelope["signatures"]
    assert signature["keyid"] == hashlib.sha256(raw).hexdigest()
    public.verify(base64.b64decode(signature["sig"]), pae(PAYLOAD_TYPE, payload))


def test_unsigned_archive_carries_a_marker_and_no_attestation(tmp_path):
    root = _unzip(_sealed(tmp_path / "a", None), tmp_path / "unzipped")
    assert "UNSIGNED" in (root / "UNSIGNED").read_text()
    assert not (root / "attestation.dsse.json").exists()


def test_resealing_replaces_the_previous_seal(tmp_path, keys):
    run_dir = toy.build_run_dir(tmp_path / "a")
    seal(run_dir, key=keys[0], sign=True)
    seal(run_dir, key=None, sign=False)
    assert (run_dir / "UNSIGNED").exists() and not (run_dir / "attestation.dsse.json").exists()
    seal(run_dir, key=keys[0], sign=True)
    assert not (run_dir / "UNSIGNED").exists()
    assert "UNSIGNED" not in (run_dir / "SHA256SUMS").read_text()


def test_write_sha256sums_standalone(tmp_path):
    run_dir = toy.build_run_dir(tmp_path / "a")
    write_sha256sums(run_dir)
    lines = (run_dir / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == sorted(line.split("  ")[1] for line in lines)


# --- reproducibility -----------------------------------------------------------------


def test_sealing_one_run_dir_twice_gives_identical_bytes(tmp_path, keys):
    run_dir = toy.build_run_dir(tmp_path / "a")
    first = seal(run_dir, key=keys[0], sign=True).read_bytes()
    # File system metadata must not reach the archive.
    for path in run_dir.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
        if path.is_file():
            path.chmod(0o600)
    assert seal(run_dir, key=keys[0], sign=True).read_bytes() == first


def test_a_copy_in_another_folder_seals_to_identical_bytes(tmp_path, keys):
    a = toy.build_run_dir(tmp_path / "a")
    b = tmp_path / "b" / RUN_ID
    shutil.copytree(a, b)
    assert (
        seal(a, key=keys[0], sign=True).read_bytes() == seal(b, key=keys[0], sign=True).read_bytes()
    )


def test_two_runs_differ_only_in_the_declared_volatile_file(tmp_path, keys):
    later = dict(toy.FIXED_VOLATILE, started_at="2025-02-02T10:00:00Z", hostname="host-b")
    a = _sealed(tmp_path / "a", keys[0])
    b = _sealed(tmp_path / "b", keys[0], volatile=later)
    assert a.read_bytes() != b.read_bytes()  # volatile.json is a member
    assert compare_archives(a, b) == []
    ma, mb = toy.members(a), toy.members(b)
    differing = {n.split("/", 1)[1] for n in ma if ma[n] != mb[n]}
    assert differing == {"volatile.json", "SHA256SUMS", "attestation.dsse.json"}
    sums_a = ma[f"{RUN_ID}/SHA256SUMS"].decode().splitlines()
    sums_b = mb[f"{RUN_ID}/SHA256SUMS"].decode().splitlines()
    assert [x for x, y in zip(sums_a, sums_b, strict=True) if x != y] == [
        x for x in sums_a if x.endswith("  volatile.json")
    ]


def test_compare_archives_ignores_the_run_id_but_not_the_data(tmp_path, keys):
    a = _sealed(tmp_path / "a", keys[0])
    b = _sealed(tmp_path / "b", keys[0], run_id="toy-0123abcd-20250303T120000")
    assert compare_archives(a, b) == []
    c = _sealed(tmp_path / "c", keys[0], groups={"sync": toy.GOOD, "async": toy.BAD})
    differences = compare_archives(a, c)
    assert "raw/counts.json: contents differ" in differences
    assert "verdict.json: contents differ" in differences


# --- signing keys --------------------------------------------------------------------


def test_resolve_signing_key_prefers_the_option_then_the_environment(tmp_path, keys):
    key, _ = keys
    other = tmp_path / "other.key"
    other.write_bytes(key.read_bytes())
    env = {"SPECCONFORM_SIGNING_KEY": str(other)}
    assert resolve_signing_key(key, env) == key
    assert resolve_signing_key(None, env) == other
    assert resolve_signing_key(None, env, sign=False) is None
    with pytest.raises(UsageError, match="no signing key"):
        resolve_signing_key(None, {})
    with pytest.raises(UsageError, match="not found"):
        resolve_signing_key(tmp_path / "missing.key", {})
    with pytest.raises(UsageError, match="contradict"):
        resolve_signing_key(key, {}, sign=False)


def test_seal_without_a_key_fails_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECCONFORM_SIGNING_KEY", raising=False)
    run_dir = toy.build_run_dir(tmp_path / "a")
    before = sorted(p.name for p in run_dir.rglob("*"))
    with pytest.raises(UsageError):
        seal(run_dir, key=None, sign=True)
    assert sorted(p.name for p in run_dir.rglob("*")) == before
    assert not run_dir.with_name(run_dir.name + ".zip").exists()


def test_seal_signs_with_the_environment_key(tmp_path, keys, monkeypatch):
    monkeypatch.setenv("SPECCONFORM_SIGNING_KEY", str(keys[0]))
    zip_path = seal(toy.build_run_dir(tmp_path / "a"), key=None, sign=True)
    assert f"{RUN_ID}/attestation.dsse.json" in toy.members(zip_path)


def test_keygen_writes_a_private_key_0600_and_a_public_key(tmp_path):
    result = CliRunner().invoke(keygen_command, ["--out", str(tmp_path / "ci")])
    assert result.exit_code == 0, result.output
    key, pub = tmp_path / "ci.key", tmp_path / "ci.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    public = serialization.load_pem_public_key(pub.read_bytes())
    assert private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    ) == public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize("existing", ["ci.key", "ci.pub"])
def test_keygen_never_overwrites(tmp_path, existing):
    (tmp_path / existing).write_text("precious")
    result = CliRunner().invoke(keygen_command, ["--out", str(tmp_path / "ci")])
    assert result.exit_code == 2
    assert "already exists" in result.stderr and len(result.stderr.splitlines()) == 1
    assert (tmp_path / existing).read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


# --- manifests -----------------------------------------------------------------------


def test_environment_manifest_is_deterministic_and_complete(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    first, second = environment_manifest(), environment_manifest()
    assert first == second
    assert json.loads(json.dumps(first)) == first
    assert first["world_size"] == 4
    assert set(first) >= {
        "git",
        "python",
        "platform",
        "cpu",
        "torch",
        "world_size",
        "specconform_version",
    }
    assert set(first["git"]) == {"commit", "dirty"}
    assert not {"started_at", "finished_at", "hostname", "pid"} & set(first)


def _git(*args, cwd) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_manifest_records_the_code_that_ran_not_the_working_directory(tmp_path, monkeypatch):
    """The git state is the package's own checkout's, from any working directory: a
    folder outside any repository, or inside another repository."""
    package_top = _git("rev-parse", "--show-toplevel", cwd=ROOT)
    expected = _git("rev-parse", "HEAD", cwd=package_top)
    other = tmp_path / "other-repo"
    other.mkdir()
    _git("init", "-q", cwd=other)
    _git(
        "-c",
        "user.name=x",
        "-c",
        "user.email=x@y",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "other",
        cwd=other,
    )
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for cwd in (tmp_path, other):
        monkeypatch.chdir(cwd)
        manifest = environment_manifest()
        assert manifest["git"]["commit"] == expected
        assert manifest["git"]["dirty"] in (True, False)
        assert manifest["world_size"] == 1
    assert manifest["code"]["files"] > 10 and len(manifest["code"]["sha256"]) == 64


def test_manifest_outside_a_checkout_still_digests_the_code(tmp_path, monkeypatch):
    """A copy of the package outside any repository (as an installed wheel is): no
    commit, but the source digest names the code, and it is the checkout's digest."""
    copy = tmp_path / "site"
    for name in ("specconform", "engine_under_test"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    probe = (
        "import json; from specconform.evidence.manifest import environment_manifest;"
        " m = environment_manifest(); print(json.dumps([m['git'], m['code']]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(copy)},
        check=True,
    )
    git, code = json.loads(done.stdout)
    assert git == {"commit": None, "dirty": None}
    assert code["sha256"] == environment_manifest()["code"]["sha256"]


def test_volatile_facts_hold_times_host_and_pid():
    start = datetime(2025, 1, 1, 12, 0, 0)  # naive: taken as UTC
    finish = datetime(2025, 1, 1, 13, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    facts = volatile_facts(start, finish)
    assert facts["started_at"] == "2025-01-01T12:00:00Z"
    assert facts["finished_at"] == "2025-01-01T12:00:00Z"
    assert facts["duration_s"] == 0.0
    assert facts["pid"] == os.getpid() and facts["hostname"]


def test_evidence_and_report_never_import_torch(tmp_path):
    zip_path = _sealed(tmp_path / "a", None)
    code = (
        "import sys; from pathlib import Path;"
        "import specconform.evidence, specconform.report, specconform.cli.evidence;"
        "from specconform.evidence import read_archive;"
        "from specconform.report import markdown_report, html_report;"
        f"p = Path({str(zip_path)!r}); read_archive(p); markdown_report([p]);"
        "html_report([p]);"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
