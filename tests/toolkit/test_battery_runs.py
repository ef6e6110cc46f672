"""Integrity of real runs (issue 13): identical inputs in two --out folders give the
same evidence outside the declared volatile file; two runs started together over one
ledger and overlapping seeds: exactly one proceeds, the other exits 2 naming it live.

Real `specconform run` processes on the 8-seed `tiny` protocol of the battery (about
ten CPU seconds each). Deterministic: no statistical assertion is made.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile

from specconform.evidence import compare_archives
from specconform.runner.ledger import read_ledger
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.test_battery_bad_input import tiny_protocol


def test_identical_inputs_in_two_out_folders_give_identical_evidence(tmp_path):
    protocol = tiny_protocol(tmp_path / "protocol")
    archives = []
    for name in ("first", "second-folder/deeper"):
        out = tmp_path / name
        proc = run_cli("run", protocol, "--out", out, "--no-sign", timeout=600)
        assert proc.returncode in (0, 1, 7), proc.stderr[-3000:]
        assert "timing:" not in proc.stderr  # only with --verbose
        archives.append(next(out.glob("*.zip")))
    first, second = archives
    assert first.name == second.name  # the run id depends on the inputs only
    assert compare_archives(first, second) == []
    a, b = zipfile.ZipFile(first), zipfile.ZipFile(second)
    assert a.namelist() == b.namelist()
    differing = {n.split("/", 1)[1] for n in a.namelist() if a.read(n) != b.read(n)}
    assert differing <= {"volatile.json", "SHA256SUMS", "attestation.dsse.json"}, differing
    for archive in archives:  # no --out path in any byte-reproducible member
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not name.endswith("volatile.json"):
                    assert str(archive.parent).encode() not in zf.read(name), name


def test_two_runs_started_together_over_one_ledger_exactly_one_proceeds(tmp_path):
    """Different batch sizes give different run ids over the same seeds; the ledger's
    lock lets one reserve, and the other is refused naming the live run.

    The winner holds right after its reservation until the test releases it
    (SPECCONFORM_TEST_HOLD_AFTER_RESERVE, runner/interrupt.py), and the test releases it
    only once the loser has exited: the winner is live when the loser checks on any
    machine (without the hold, a winner that finished before a slow loser's check made
    the refusal name a finished run instead)."""
    protocol = tiny_protocol(tmp_path / "protocol")
    ledger = tmp_path / "shared" / "ledger.jsonl"
    release = tmp_path / "release"
    env = dict(os.environ, CI="true", SPECCONFORM_TEST_HOLD_AFTER_RESERVE=str(release))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specconform",
                "run",
                str(protocol),
                "--batch-size",
                str(batch),
                "--out",
                str(tmp_path / f"o{batch}"),
                "--ledger",
                str(ledger),
                "--no-sign",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for batch in (4, 8)
    ]
    # Wait for the first exit (the loser's: the winner holds), then release the winner.
    # A poll, but not a race: nothing here depends on when the loop looks.
    deadline = time.monotonic() + 600  # a hang guard only
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    release.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        results.append((p.returncode, out, err))
    codes = sorted(code for code, _, _ in results)
    assert codes[0] in (0, 1) and codes[1] == 2, [(c, e[-2000:]) for c, _, e in results]
    winner = next(i for i, (code, _, _) in enumerate(results) if code != 2)
    _, _, refusal = next(r for r in results if r[0] == 2)
    lines = refusal.splitlines()
    assert len(lines) == 1 and "overlap" in lines[0] and "(live: pid" in lines[0], refusal
    loser_out = tmp_path / f"o{(4, 8)[1 - winner]}"
    assert not loser_out.exists()  # refused before anything: no OUT, no .inprogress
    assert len({e.run_id for e in read_ledger(ledger)}) == 1  # only the winner reserved
