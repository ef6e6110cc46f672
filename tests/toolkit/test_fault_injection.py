"""Fault injection into the engine adapter (issue 37, part 5): every row of the table in
docs/contracts.md section 7 runs as a real `specconform run` and must end with that
row's exit code, error line and state left in --out. The table is read from the doc, so
doc and test cannot drift.

No statistics here: each outcome is structural and deterministic (a hang is infinite,
the deadline 1 s; a fault strikes at a fixed call), so no alpha or power applies. The
negative control: the same adapter with no fault striking (``after`` past every call)
must PASS the run, so an outcome below is the fault's, not the harness's.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.fault_adapter import FAULTS, HEALED_ENV
from tests.toolkit.fixtures.adapter_protocol import adapter_protocol

CONTRACTS = ROOT / "docs" / "contracts.md"
SECTION = "Adapter deadlines and faults"


def fault_table() -> list[dict[str, str]]:
    """The rows of the fault table: fault, strikes in, exit, message, left."""
    text = CONTRACTS.read_text()
    start = text.index(f"## 7. {SECTION}")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows.append(
                {
                    "fault": cells[0].strip("`"),
                    "strikes": cells[1],
                    "exit": cells[2],
                    "message": cells[3].strip("`"),
                    "left": cells[4],
                }
            )
    return rows


ROWS = fault_table()


def _protocol(tmp_path: Path, **options) -> Path:
    """A small distribution protocol over the fault adapter: 2 groups x 20 seeds in
    batches of 10 (4 run_group calls)."""
    data = adapter_protocol(
        "fault_injection",
        "tests.toolkit.fault_adapter:factory",
        {"vocab": 8, "draft_noise": 1.0, **options},
        seeds=20,
        batch_size=10,
        strata={"min_samples": 5, "min_expected": 1.0},
        tests=[{"name": "t1_sync", "type": "t1_gof", "role": "prerequisite", "groups": ["sync"]}],
    )
    path = tmp_path / "fault_injection.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_table_covers_every_fault_once():
    assert sorted(r["fault"] for r in ROWS) == sorted(FAULTS)
    for row in ROWS:
        assert row["strikes"] == FAULTS[row["fault"]], row
        assert row["left"] in ("nothing", "checkpoint"), row


def test_negative_control_no_fault_strikes_and_the_run_passes(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("run", _protocol(tmp_path, fault="raises", after=99), "--out", out, "--no-sign")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(out.glob("*.zip"))) == 1 and not list(out.glob("*.inprogress"))


def _assert_left(out: Path, left: str) -> None:
    if left == "nothing":
        assert not out.exists(), sorted(p.name for p in out.rglob("*"))
        return
    names = sorted(p.name for p in out.iterdir() if p.name != ".cache")
    folders = [n for n in names if n.endswith(".inprogress")]
    assert len(folders) == 1 and not [n for n in names if n.endswith(".zip")], names
    assert not [n for n in names if n.startswith(".partial")], names
    folder = out / folders[0]
    assert (folder / "checkpoint.json").exists()
    batches = list((folder / "batches").glob("*.csv"))
    assert len(batches) == 1 and not list(folder.rglob("*.tmp")), batches
    attempt = json.loads((folder / "checkpoint.json").read_text())["attempt"]
    ledger = (out / "seed-ledger.jsonl").read_text()
    assert attempt in ledger  # the reservation kept, for --resume


@pytest.mark.parametrize("row", ROWS, ids=[r["fault"] for r in ROWS])
def test_each_fault_ends_as_the_table_says(tmp_path, row):
    out = tmp_path / "out"
    path = _protocol(tmp_path, fault=row["fault"])
    # A 1-s deadline for the hangs; the others keep the default (an answer that imports
    # torch, wrong_device, may take longer than 1 s on a loaded machine).
    deadline = ["--adapter-timeout", "1"] if row["exit"] == "124" else []
    proc = run_cli("run", path, "--out", out, "--no-sign", *deadline, timeout=120)
    assert proc.returncode == int(row["exit"]), (proc.returncode, proc.stderr[-2000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert row["message"] in errors[0], errors[0]
    assert errors[0] == proc.stderr.rstrip("\n").splitlines()[-1]  # the last line
    _assert_left(out, row["left"])


def test_a_timed_out_run_resumes_to_a_verdict(tmp_path):
    """The checkpoint a hang leaves is good for --resume: the healed adapter finishes the
    run from it, and the archive holds every seed once."""
    out = tmp_path / "out"
    path = _protocol(tmp_path, fault="hangs_sleeping")
    hung = run_cli("run", path, "--out", out, "--no-sign", "--adapter-timeout", "1")
    assert hung.returncode == 124, hung.stderr[-2000:]
    folder = next(out.glob("*.inprogress"))
    assert f"--resume {folder}" in hung.stderr
    resumed = run_cli(
        "run", path, "--out", out, "--no-sign", "--resume", folder, env={HEALED_ENV: "1"}
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not folder.exists() and len(list(out.glob("*.zip"))) == 1
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    samples = (run_dir / "raw" / "samples.csv").read_text().splitlines()
    assert len(samples) == 1 + 2 * 20  # header + every seed of both groups, once


def test_the_deadline_is_not_part_of_the_claim(tmp_path):
    """engine.call_timeout_s in the file or --adapter-timeout: same hash, same run id."""
    from specconform.protocol.load import load_protocol
    from specconform.runner.assemble import RunRequest, prepare
    from specconform.runner.execute import make_run_id

    plain = _protocol(tmp_path, fault="raises")
    data = yaml.safe_load(plain.read_text())
    data["engine"]["call_timeout_s"] = 5
    timed = tmp_path / "timed.yaml"
    timed.write_text(yaml.safe_dump(data))
    a, b = load_protocol(plain), load_protocol(timed)
    assert a.hash == b.hash and a.data == b.data and make_run_id(a, None) == make_run_id(b, None)
    assert b.model.engine.call_timeout_s == 5.0 and a.model.engine.call_timeout_s == 3600.0
    request = RunRequest(protocol=plain, out_dir=tmp_path, argv=(), sign=False, adapter_timeout=2)
    prepared = prepare(request)
    assert prepared.loaded.model.engine.call_timeout_s == 2.0
    assert prepared.loaded.hash == a.hash and prepared.loaded.data == a.data
    from specconform.util.errors import UsageError

    for bad in (0.0, -1.0, float("nan"), float("inf")):  # the API's values are checked too
        with pytest.raises(UsageError, match="--adapter-timeout"):
            prepare(dataclasses.replace(request, adapter_timeout=bad))


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "abc", "604801"])
def test_bad_adapter_timeouts_are_one_line(tmp_path, value):
    proc = run_cli(
        "run", _protocol(tmp_path, fault="raises"), "--out", tmp_path / "o", "--adapter-timeout",
        value,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert re.match(r"error: .*--adapter-timeout", proc.stderr), proc.stderr
    assert not (tmp_path / "o").exists()


def test_adapter_timeout_applies_only_to_adapters(tmp_path):
    proc = run_cli(
        "run", ROOT / "protocols" / "equality.yaml", "--out", tmp_path / "o",
        "--adapter-timeout", "5",
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--adapter-timeout: applies to protocols run through an adapter" in proc.stderr


@pytest.mark.parametrize("value", [0, -1, 10**9])
def test_bad_call_timeouts_in_the_protocol_are_refused(tmp_path, value):
    from specconform.protocol.load import load_protocol
    from specconform.util.errors import ProtocolError

    data = yaml.safe_load(_protocol(tmp_path, fault="raises").read_text())
    data["engine"]["call_timeout_s"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProtocolError, match="engine.call_timeout_s"):
        load_protocol(path)
