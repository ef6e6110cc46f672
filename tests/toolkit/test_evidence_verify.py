"""`specconform verify`: a valid archive passes; every tampering is rejected with exit 3
naming the first failing file or field; usage problems exit 2."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import verify_command, write_key_pair
from specconform.evidence import seal, write_reproducible_zip, write_sha256sums
from specconform.evidence.results_io import tests_csv_bytes as csv_for_rows
from specconform.evidence.sha256sums import sha256_hex
from specconform.util.errors import EvidenceError
from specconform.verification import verify_archive
from tests.toolkit.fixtures import evidence_toy as toy

RUN_ID = "toy-0123abcd-20250101T000000"


# toy_kind and keys: tests/toolkit/conftest.py.
pytestmark = pytest.mark.usefixtures("toy_kind")


@pytest.fixture
def other_keys(tmp_path):
    (tmp_path / "other").mkdir()
    return write_key_pair(tmp_path / "other" / "attacker")


@pytest.fixture
def signed(tmp_path, keys):
    return seal(toy.build_run_dir(tmp_path / "signed"), key=keys[0], sign=True)


@pytest.fixture
def unsigned(tmp_path):
    return seal(toy.build_run_dir(tmp_path / "unsigned"), key=None, sign=False)


def _verify(archive: Path, *args: str):
    return CliRunner().invoke(verify_command, [str(archive), *args])


def _assert_rejected(result, *fragments: str, code: int = 3) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stdout == ""  # no partial output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _tampered(
    tmp_path: Path, archive: Path, edit, *, resum: bool = True, resign: Path | None = None
) -> Path:
    """Unzip `archive`, let `edit(run_dir)` change files, then rebuild the zip:
    SHA256SUMS recomputed when `resum`, re-sealed with key `resign` when given."""
    work = tmp_path / "tamper"
    shutil.rmtree(work, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(work)
    run_dir = work / RUN_ID
    edit(run_dir)
    if resign is not None:
        return seal(run_dir, key=resign, sign=True)
    if resum:
        write_sha256sums(run_dir)
    out = work / "tampered.zip"
    write_reproducible_zip(run_dir, out, top=RUN_ID)
    return out


# --- valid archives ------------------------------------------------------------------


def test_signed_archive_verifies_with_its_public_key(signed, keys):
    result = _verify(signed, "--pubkey", str(keys[1]))
    assert result.exit_code == 0, result.output
    assert "valid Ed25519 signature" in result.stdout
    assert "recomputed: 4 tests and the verdict (PASS)" in result.stdout
    report = verify_archive(signed, keys[1])
    assert report.trusted and report.signature == "valid" and report.run_id == RUN_ID


def test_a_failing_verdict_is_still_valid_evidence(tmp_path, keys):
    archive = seal(
        toy.build_run_dir(tmp_path / "fail", groups={"sync": toy.BAD}), key=keys[0], sign=True
    )
    result = _verify(archive, "--pubkey", str(keys[1]))
    assert result.exit_code == 0, result.output
    assert "(FAIL)" in result.stdout


def test_signed_archive_without_pubkey_needs_explicit_skip(signed):
    _assert_rejected(_verify(signed), "--pubkey", "--skip-signature", code=2)
    result = _verify(signed, "--skip-signature")
    assert result.exit_code == 0, result.output
    assert "NOT checked" in result.stdout
    report = verify_archive(signed, None)
    assert report.signature == "not checked" and not report.trusted


def test_unsigned_archive_verifies_only_with_skip_signature(unsigned, keys):
    result = _verify(unsigned, "--skip-signature")
    assert result.exit_code == 0, result.output
    assert "UNSIGNED" in result.stdout
    _assert_rejected(_verify(unsigned, "--pubkey", str(keys[1])), "UNSIGNED", "unsigned")
    _assert_rejected(_verify(unsigned), code=2)


def test_pubkey_and_skip_signature_contradict(signed, keys):
    _assert_rejected(_verify(signed, "--pubkey", str(keys[1]), "--skip-signature"), code=2)


# --- tampering: every member ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["signed", "unsigned"])
def test_flipping_a_byte_in_every_member_is_rejected(tmp_path, request, keys, kind):
    archive = request.getfixturevalue(kind)
    args = ["--pubkey", str(keys[1])] if kind == "signed" else ["--skip-signature"]
    original = toy.members(archive)
    assert len(original) >= 12
    for name, data in original.items():
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        bad = toy.rewrite_zip(archive, tmp_path / "flipped.zip", replace={name: bytes(flipped)})
        result = _verify(bad, *args)
        _assert_rejected(result)
        short = name.split("/", 1)[1]
        assert short in result.stderr or "SHA256SUMS" in result.stderr, (name, result.stderr)


def test_corrupting_compressed_bytes_of_every_member_is_rejected(tmp_path, signed, keys):
    with zipfile.ZipFile(signed) as zf:
        infos = zf.infolist()
    raw = signed.read_bytes()
    for info in infos:
        header = info.header_offset
        name_len = int.from_bytes(raw[header + 26 : header + 28], "little")
        extra_len = int.from_bytes(raw[header + 28 : header + 30], "little")
        offset = header + 30 + name_len + extra_len + info.compress_size // 2
        corrupted = bytearray(raw)
        corrupted[offset] ^= 0xFF
        bad = tmp_path / "corrupt.zip"
        bad.write_bytes(bytes(corrupted))
        _assert_rejected(_verify(bad, "--pubkey", str(keys[1])))


@pytest.mark.parametrize("kind", ["signed", "unsigned"])
def test_dropping_any_member_is_rejected(tmp_path, request, keys, kind):
    archive = request.getfixturevalue(kind)
    args = ["--pubkey", str(keys[1])] if kind == "signed" else ["--skip-signature"]
    for name in toy.members(archive):
        bad = toy.rewrite_zip(archive, tmp_path / "dropped.zip", drop={name})
        _assert_rejected(_verify(bad, *args))


def test_adding_a_file_is_rejected(tmp_path, signed, keys):
    bad = toy.rewrite_zip(signed, tmp_path / "added.zip", add={f"{RUN_ID}/raw/extra.json": b"{}"})
    _assert_rejected(
        _verify(bad, "--pubkey", str(keys[1])), "raw/extra.json", "not listed in SHA256SUMS"
    )


def test_adding_a_file_listed_in_sha256sums_is_caught_by_the_attestation(tmp_path, signed, keys):
    bad = _tampered(tmp_path, signed, lambda d: (d / "notes.txt").write_text("trust me\n"))
    _assert_rejected(_verify(bad, "--pubkey", str(keys[1])), "attestation.dsse.json", "notes.txt")


def test_a_second_top_folder_is_rejected(tmp_path, signed, keys):
    bad = toy.rewrite_zip(signed, tmp_path / "two.zip", add={"elsewhere/x.txt": b"x"})
    _assert_rejected(_verify(bad, "--pubkey", str(keys[1])), "one top folder")


def test_top_folder_must_be_the_run_id(tmp_path, unsigned):
    renamed = {
        name.replace(RUN_ID, "toy-renamed", 1): data for name, data in toy.members(unsigned).items()
    }
    bad = tmp_path / "renamed.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        for name, data in renamed.items():
            zf.writestr(name, data)
    _assert_rejected(_verify(bad, "--skip-signature"), "run.json", "top folder")


# --- tampering that keeps SHA256SUMS consistent --------------------------------------


def _set_verdict(run_dir: Path, verdict: str) -> None:
    path = run_dir / "verdict.json"
    data = json.loads(path.read_text())
    data["verdict"] = verdict
    path.write_text(json.dumps(data))


def test_edited_verdict_in_a_signed_archive_fails_the_attestation(tmp_path, signed, keys):
    bad = _tampered(tmp_path, signed, lambda d: _set_verdict(d, "FAIL"))
    _assert_rejected(_verify(bad, "--pubkey", str(keys[1])), "attestation.dsse.json")


def test_edited_verdict_in_an_unsigned_archive_fails_recomputation(tmp_path, unsigned):
    bad = _tampered(tmp_path, unsigned, lambda d: _set_verdict(d, "FAIL"))
    _assert_rejected(_verify(bad, "--skip-signature"), "verdict.json", "verdict")


def test_edited_verdict_resigned_by_another_key_is_rejected(tmp_path, signed, keys, other_keys):
    bad = _tampered(tmp_path, signed, lambda d: _set_verdict(d, "FAIL"), resign=other_keys[0])
    _assert_rejected(
        _verify(bad, "--pubkey", str(keys[1])),
        "attestation.dsse.json",
        "not by the given public key",
    )
    # Even the attacker's own key does not make a false verdict valid.
    _assert_rejected(_verify(bad, "--pubkey", str(other_keys[1])), "verdict.json")


def _edit_pvalue(run_dir: Path) -> None:
    from specconform.evidence.reader import row_from_json

    path = run_dir / "results" / "tests.json"
    rows = json.loads(path.read_text())
    rows[0]["pvalue"] = 0.5 if rows[0]["pvalue"] != 0.5 else 0.25
    path.write_text(json.dumps(rows))
    (run_dir / "results" / "tests.csv").write_bytes(
        csv_for_rows([row_from_json(r, "tests.json") for r in rows])
    )


def test_consistently_edited_pvalue_fails_recomputation(tmp_path, unsigned):
    bad = _tampered(tmp_path, unsigned, _edit_pvalue)
    _assert_rejected(_verify(bad, "--skip-signature"), "results/tests.json", "gof_async", "pvalue")


def test_csv_that_disagrees_with_json_is_rejected(tmp_path, unsigned):
    def edit(run_dir: Path) -> None:
        path = run_dir / "results" / "tests.csv"
        path.write_text(path.read_text().replace(",true,", ",false,", 1))

    bad = _tampered(tmp_path, unsigned, edit)
    _assert_rejected(_verify(bad, "--skip-signature"), "results/tests.csv", "passed")


def test_edited_raw_counts_fail_recomputation(tmp_path, unsigned):
    def edit(run_dir: Path) -> None:
        path = run_dir / "raw" / "counts.json"
        counts = json.loads(path.read_text())
        counts["groups"]["sync"] = toy.BAD
        path.write_text(json.dumps(counts))

    bad = _tampered(tmp_path, unsigned, edit)
    _assert_rejected(_verify(bad, "--skip-signature"), "results/tests.json", "gof_sync")


def test_sha256sums_digest_edited_alone_is_rejected(tmp_path, unsigned):
    def edit(run_dir: Path) -> None:
        path = run_dir / "SHA256SUMS"
        lines = path.read_text().splitlines()
        digest, name = lines[0].split("  ", 1)
        lines[0] = f"{sha256_hex(b'x')}  {name}"
        path.write_text("\n".join(lines) + "\n")

    bad = _tampered(tmp_path, unsigned, edit, resum=False)
    _assert_rejected(_verify(bad, "--skip-signature"), "sha256 does not match SHA256SUMS")


# --- keys and usage ------------------------------------------------------------------


def test_wrong_public_key_is_rejected(signed, other_keys):
    _assert_rejected(
        _verify(signed, "--pubkey", str(other_keys[1])),
        "attestation.dsse.json",
        "not by the given public key",
    )


def test_missing_archive_or_key_file_is_a_usage_error(tmp_path, signed):
    _assert_rejected(_verify(tmp_path / "nope.zip", "--skip-signature"), "not found", code=2)
    _assert_rejected(_verify(signed, "--pubkey", str(tmp_path / "nope.pub")), "not found", code=2)


def test_a_private_key_is_not_a_public_key(signed, keys):
    _assert_rejected(_verify(signed, "--pubkey", str(keys[0])), code=2)


def test_a_file_that_is_not_a_zip_is_invalid(tmp_path):
    bad = tmp_path / "junk.zip"
    bad.write_bytes(b"not a zip at all")
    _assert_rejected(_verify(bad, "--skip-signature"), "not a readable zip")


def test_verify_needs_the_kinds_reevaluate(signed, keys, monkeypatch):
    # Without the kinds' evaluator nothing is recomputed, and that is a failed
    # verification, never a pass.
    import specconform.kinds

    monkeypatch.delattr(specconform.kinds, "reevaluate")
    with pytest.raises(EvidenceError, match="recomputation failed"):
        verify_archive(signed, keys[1])


def test_exit_codes_survive_the_real_command_line(tmp_path, signed):
    """Through `python -m specconform` (specconform.cli registers these commands)."""
    import subprocess

    from specconform import cli

    assert {"verify", "report", "keygen"} <= set(cli.cli.commands)
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"junk")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "specconform", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    invalid = run("verify", str(junk), "--skip-signature")
    assert invalid.returncode == 3 and invalid.stderr.count("\n") == 1
    usage = run("verify", str(signed))
    assert usage.returncode == 2 and "--pubkey" in usage.stderr


def test_a_recomputation_error_names_the_runs_numpy_when_it_differs():
    """The kernel protocols' laws follow numpy's Generator methods, which change across
    numpy versions (docs/peers.md): a recomputation error says which versions differ,
    and says nothing when they match."""
    import numpy
    import scipy

    from specconform.verification.verify import _version_note

    class _Contents:
        def __init__(self, packages):
            self.packages = packages

        def json_object(self, name):
            assert name == "environment.json"
            return {"packages": self.packages}

    same = {"numpy": numpy.__version__, "scipy": scipy.__version__}
    assert _version_note(_Contents(same)) == ""
    note = _version_note(_Contents({**same, "numpy": "0.0.1"}))
    assert f"numpy 0.0.1 (here {numpy.__version__})" in note and "scipy" not in note
