"""The Python API has every capability of the command line (issue 31): `specconform.run`
and `specconform run` go through one run assembly (`runner.assemble`), so a run from
code keeps a seed ledger, resumes an interrupted run and runs sequentially, and refuses
what the kind cannot do with the CLI's own one-line message.

Bundled engine, tiny preset (the fixtures of test_sequential_run and
test_distribution_protocols); the interruption is the run's own deterministic hook
(SPECCONFORM_TEST_INTERRUPT: it signals itself after its N-th batch file), in a child
process that calls the API, never a race with a timer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

import specconform  # noqa: E402
from specconform.util.errors import UsageError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEQUENTIAL = ROOT / "tests/toolkit/fixtures/sequential_protocol.yaml"


def _ledger_groups(path: Path) -> list[str]:
    entries = [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted({e["group"] for e in entries if "group" in e})


def test_api_runs_a_sequential_ledgered_run(tmp_path):
    ledger = tmp_path / "ledger" / "seeds.jsonl"
    done = specconform.run(
        SEQUENTIAL, out=tmp_path / "out", sign=False, ledger=ledger, mutant="residual_from_p"
    )
    assert done.verdict == "FAIL"  # the planted bug is caught before the budget
    rows = {t.test: t for t in done.tests}
    assert "sequential_eprocess" in rows
    assert (done.run_dir / "results/sequential.csv").exists()
    assert _ledger_groups(ledger) == ["async", "async_d1", "nospec"]


CHILD = """
import sys
import specconform
specconform.run(sys.argv[1], out=sys.argv[2], sign=False, ledger=sys.argv[3])
"""


def _small_protocol(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "protocols/ci_gate.yaml").read_text())
    data["name"] = "ci_gate_api"
    data["seeds"]["count"] = 100
    data["engine"]["batch_size"] = 50
    data["strata"]["min_samples"] = 50
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_api_resumes_an_interrupted_ledgered_run(tmp_path):
    protocol = _small_protocol(tmp_path)
    out, ledger = tmp_path / "out", tmp_path / "ledger.jsonl"
    env = dict(os.environ, SPECCONFORM_TEST_INTERRUPT="2:SIGKILL")
    stopped = subprocess.run(
        [sys.executable, "-c", CHILD, str(protocol), str(out), str(ledger)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-2000:]
    (folder,) = out.glob("*.inprogress")
    assert len(list((folder / "batches").glob("*.csv"))) == 2
    # Without --resume the same inputs are refused, naming the folder to resume.
    with pytest.raises(UsageError, match="resume"):
        specconform.run(protocol, out=out, sign=False, ledger=ledger)
    done = specconform.run(protocol, out=out, sign=False, ledger=ledger, resume=folder)
    assert done.run_id == folder.name.removesuffix(".inprogress")
    assert done.archive.exists() and not list(out.glob("*.inprogress"))
    assert set(_ledger_groups(ledger)) >= {"nospec"}
    # The same seeds again, into another folder: the ledger refuses the overlap, from
    # code as on the command line.
    with pytest.raises(UsageError, match="overlap"):
        specconform.run(protocol, out=tmp_path / "again", sign=False, ledger=ledger)


@pytest.mark.parametrize(
    ("protocol", "options", "message"),
    [
        ("protocols/quadrature.yaml", {"sequential": True}, "applies to distribution protocols"),
        ("protocols/quadrature.yaml", {"ledger": "x.jsonl"}, "--ledger applies to distribution"),
        ("protocols/quadrature.yaml", {"resume": "x.inprogress"}, "--resume applies to"),
        (SEQUENTIAL, {"resume": "somewhere"}, "does not resume"),
    ],
)
def test_api_refuses_what_the_kind_cannot_do(tmp_path, protocol, options, message):
    with pytest.raises(UsageError, match=message):
        specconform.run(ROOT / protocol, out=tmp_path / "out", sign=False, **options)
    assert not (tmp_path / "out").exists()
