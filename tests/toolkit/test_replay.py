"""`specconform replay`: one failing case re-run from the archive's own protocol, mutant,
seed and batch (issue 36's Done-when case, on ci_gate's async group alone).

The run is real (bundled engine, tiny preset, CPU, seeds 0..1999 in one batch) under
--mutant bonus_params: deterministic, so the out-of-support tokens are always the same
two (seeds 817 and 1662, token index 2). Negative control: the same archive with its
run.json saying no mutant replays on the correct engine, where the case must NOT
reproduce (exit 0): a replay that always said "reproduced" fails it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specconform.diagnosis import diagnose_archive
from specconform.evidence import read_archive

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "tests/toolkit/fixtures/replay_protocol.yaml"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specconform", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("replay")
    done = _cli("run", str(PROTOCOL), "--mutant", "bonus_params", "--out", str(out), "--no-sign")
    assert done.returncode == 1, done.stderr
    # The run itself says where the out-of-support tokens are, and how to replay one.
    assert "where it differs:" in done.stdout
    assert "group async request 817 seed 817 position 2 token 255" in done.stdout
    assert "p=0" in done.stdout and "--test out_of_support --case 0" in done.stdout
    # q of the offending token at the group's draft depth, recorded by the runner: the
    # bonus bug samples outside top-k, where the draft law (top-k applied) is 0 too.
    assert "token 255 after [45, 130]: p=0 q=0\n" in done.stdout
    (path,) = out.glob("*.zip")
    return path


def _without_mutant(archive: Path, dest: Path) -> Path:
    """The archive with run.json's mutant removed (replay reads, never verifies)."""
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/run.json"):
                run = json.loads(data)
                run["mutant"] = None
                data = json.dumps(run).encode()
            out.writestr(info.filename, data)
    return dest


def test_the_run_records_the_engine_beside_specconform(archive):
    """run.json names the engine the run drove (package, version, commit of its
    checkout) beside specconform's own code in environment.json (issue 36, part 5)."""
    contents = read_archive(archive)
    engine = contents.json_object("run.json")["engine_adapter"]["engine"]
    env = contents.json_object("environment.json")
    assert engine["package"] == "engine_under_test" and engine["version"]
    # The bundled engine lives in this checkout: the same commit as specconform's.
    assert engine["commit"] == env["git"]["commit"] and len(engine["commit"] or "") == 40
    pytest.importorskip("matplotlib")
    from specconform.report import html_report

    page = html_report([archive])
    assert (
        f"<td>engine</td><td>engine_under_test {engine['version']} @ {engine['commit'][:12]}"
        in page
    )


def test_replay_reproduces_the_out_of_support_case(archive):
    (d,) = [d for d in diagnose_archive(read_archive(archive)) if d.test == "out_of_support"]
    assert [(o.seed, o.position) for o in d.offenders] == [(817, 2), (1662, 2)]
    done = _cli("replay", str(archive), "--test", "out_of_support", "--case", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "group async seed 1662" in out and "mutant bonus_params" in out
    # Side by side: position, the engine's token, p and q of it, the reference's tokens.
    (row,) = [line for line in out.splitlines() if line.strip().startswith("2 ")]
    assert " 43 " in row and "<- out of support" in row
    assert "reproduced: out of support (exit 1)" in out


def test_replay_on_the_correct_engine_does_not_reproduce(archive, tmp_path):
    clean = _without_mutant(archive, tmp_path / archive.name)
    done = _cli("replay", str(clean), "--test", "out_of_support", "--case", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not reproduced" in done.stdout and "<- out of support" not in done.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--test", "nope"], "no such test"),
        (["--test", "t2_async"], "statistical"),
        (["--test", "out_of_support", "--case", "9"], "has 2 case(s)"),
    ],
)
def test_replay_bad_input_is_one_line_exit_2(archive, args, words):
    done = _cli("replay", str(archive), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr


def test_replay_missing_archive(tmp_path):
    done = _cli("replay", str(tmp_path / "none.zip"), "--test", "x")
    assert done.returncode == 2 and "no such archive" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
