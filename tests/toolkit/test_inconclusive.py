"""INCONCLUSIVE end to end (issue 32, part 3): a deciding test without evidence is not a
failure of the engine.

Verdict rule (kinds.verdict.family_verdict): FAIL if any deciding test failed, else
INCONCLUSIVE if any had no evidence, else PASS. Exit codes: run 0/1/7, gate 7 unless
accepted (--inconclusive-ok, verdict.inconclusive: pass). The pre-run plan check
(planning.evidence) refuses seeds that cannot give a deciding test evidence, before any
model loads, unless --allow-inconclusive. Archives of results schema 2 keep their
reading (a test without evidence failed the verdict) under `verify`.

No statistical threshold is asserted here: every case is a rule on given rows or a run
whose outcome (df 0 at 100 seeds < min_samples 200) is certain whatever the seeds.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specconform.kinds.verdict import FamilyRule, family_verdict, gate_outcome, run_outcome
from specconform.planning.evidence import distribution_shortfalls
from specconform.protocol.load import load_protocol
from specconform.results import RESULTS_SCHEMA, TestRow, Verdict
from specconform.util.errors import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
from tests.toolkit.cli_helpers import ROOT, assert_cli_refused, run_cli

RULE = FamilyRule(("primary",), "holm", 0.01)


def _row(name: str, p: float | None) -> TestRow:
    status = "NO_EVIDENCE" if p is None else ""
    return TestRow(name, "primary", 1.0, 1.0, p, 100, 0.01, p is not None and p >= 0.01,
                   status=status)  # fmt: skip


def test_three_outcomes_fail_wins_over_no_evidence():
    _, passed = family_verdict([_row("a", 0.5), _row("b", 0.9)], RULE)
    _, unknown = family_verdict([_row("a", 0.5), _row("b", None)], RULE)
    _, failed = family_verdict([_row("a", 1e-6), _row("b", None)], RULE)
    assert (passed.verdict, unknown.verdict, failed.verdict) == ("PASS", "INCONCLUSIVE", "FAIL")
    assert unknown.failed == () and unknown.inconclusive == ("b",)
    assert failed.failed == ("a",) and failed.inconclusive == ("b",)
    assert dict(failed.reasons) == {"a": "p_Holm < 0.01", "b": "no evidence"}
    # the archive states both lists (schema 3) and reads them back
    assert unknown.schema == RESULTS_SCHEMA == 3
    data = unknown.to_json()
    assert data["inconclusive"] == ["b"] and data["verdict"] == "INCONCLUSIVE"
    assert Verdict.from_json(data).inconclusive == ("b",)


def test_schema2_reading_is_the_old_fail():
    _, verdict = family_verdict([_row("b", None), _row("a", 1e-6), _row("c", None)], RULE)
    old = verdict.as_schema2(("b", "a", "c"))
    assert old.verdict == "FAIL" and old.failed == ("b", "a", "c") and old.schema == 2
    assert "inconclusive" not in old.to_json()
    _, clean = family_verdict([_row("a", 0.5)], RULE)
    expected = {k: v for k, v in clean.to_json().items() if k != "inconclusive"}
    assert clean.as_schema2(("a",)).to_json() == {**expected, "schema": 2}


@pytest.mark.parametrize(
    ("verdict", "stated", "ok", "code", "says"),
    [
        ("PASS", None, False, EXIT_PASS, ""),
        ("FAIL", "pass", True, EXIT_FAIL, ""),  # acceptance never turns a FAIL green
        ("INCONCLUSIVE", None, False, EXIT_INCONCLUSIVE, "counts as a failure"),
        ("INCONCLUSIVE", "fail", False, EXIT_INCONCLUSIVE, "counts as a failure"),
        ("INCONCLUSIVE", None, True, EXIT_PASS, "accepted (--inconclusive-ok)"),
        ("INCONCLUSIVE", "pass", False, EXIT_PASS, "verdict.inconclusive: pass"),
    ],
)
def test_gate_reads_inconclusive_by_its_policy_and_says_so(verdict, stated, ok, code, says):
    protocol = {"verdict": {"combine": "holm", "alpha": 0.01, "inconclusive": stated}}
    out = gate_outcome(verdict, protocol, inconclusive_ok=ok)
    assert out.exit_code == code and says in out.line and (out.line == "") == (says == "")
    assert run_outcome(verdict).exit_code == {
        "PASS": EXIT_PASS, "FAIL": EXIT_FAIL, "INCONCLUSIVE": EXIT_INCONCLUSIVE
    }[verdict]  # fmt: skip


def test_exit_code_7_collides_with_no_other_specconform_or_pytest_code():
    from specconform.util import errors

    others = [getattr(errors, n) for n in dir(errors) if n.startswith("EXIT_")]
    assert others.count(EXIT_INCONCLUSIVE) == 1
    assert EXIT_INCONCLUSIVE not in {int(c) for c in pytest.ExitCode}  # pytest: 0..6
    assert f"| {EXIT_INCONCLUSIVE} |" in (ROOT / "README.md").read_text()


def _ci_gate(seeds: int) -> dict:
    data = load_protocol(ROOT / "protocols/ci_gate.yaml").data
    return {**data, "seeds": {**data["seeds"], "count": seeds}}


def test_shortfalls_are_certain_bounds_of_the_protocol():
    assert distribution_shortfalls(_ci_gate(2000)) == ()  # the shipped size: none
    short = {s.test: s for s in distribution_shortfalls(_ci_gate(199))}
    # stratified deciding tests need one stratum of min_samples = 200 seeds
    assert set(short) == {"t2_async", "t2_async_vs_nospec", "joint_async", "joint_async_d1",
                          "acceptance_async", "acceptance_async_d1"}  # fmt: skip
    assert {s.needed for s in short.values()} == {200}
    assert "t2_sync" not in short  # secondary: never decides, never refuses
    assert distribution_shortfalls(_ci_gate(200)) == ()
    # t1 (not stratified) needs 2 x min_expected = 10 seeds
    assert {s.test for s in distribution_shortfalls(_ci_gate(9))} >= {"t1_nospec"}
    assert "t1_nospec" not in {s.test for s in distribution_shortfalls(_ci_gate(10))}
    # negative control: two groups on one seed set split even/odd (2 x 200 - 1 seeds)
    shared = _ci_gate(300)
    shared["groups"] = [{**g, "seed_offset": 0} for g in shared["groups"]]
    names = {s.test: s.needed for s in distribution_shortfalls(shared)}
    assert names == {"t2_async_vs_nospec": 399}


def test_refusal_comes_before_any_model_or_torch(tmp_path):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from specconform.util.errors import UsageError\n"
        "from specconform.runner.assemble import RunRequest, prepare\n"
        f"req = RunRequest(protocol=Path({str(ROOT / 'protocols/ci_gate.yaml')!r}), "
        f"out_dir=Path({str(tmp_path / 'out')!r}), argv=(), seeds=100, sign=False)\n"
        "try:\n    prepare(req)\nexcept UsageError as e:\n    print('refused:', e)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: deciding test t2_async cannot have evidence at 100 seeds")
    assert "needs at least 200" in lines[0]
    assert lines[1] == "False"  # no torch, no engine, no model
    assert not (tmp_path / "out").exists()  # nothing written


def test_cli_run_refuses_then_gate_is_inconclusive_end_to_end(tmp_path):
    out = tmp_path / "out"
    refused = run_cli("run", "protocols/ci_gate.yaml", "--seeds", "100", "--out", out,
                      "--no-sign")  # fmt: skip
    assert_cli_refused(refused, 2, "--allow-inconclusive")
    assert not out.exists()
    junit = tmp_path / "j.xml"
    done = run_cli("gate", "protocols/ci_gate.yaml", "--seeds", "100", "--out", out, "--no-sign",
                   "--allow-inconclusive", "--junit", junit)  # fmt: skip
    assert done.returncode == EXIT_INCONCLUSIVE, done.stderr[-2000:]
    assert "result: INCONCLUSIVE" in done.stdout
    assert "gate: INCONCLUSIVE counts as a failure" in done.stdout
    assert "INCONCLUSIVE: no evidence for t2_async" in done.stdout  # the table's footer
    (suite,) = ET.parse(junit).getroot().findall("testsuite")
    errors = {c.get("name") for c in suite.findall("testcase") if c.find("error") is not None}
    assert "t2_async" in errors and suite.get("failures") == "0"
    (archive,) = out.glob("*.zip")
    verified = run_cli("verify", "--skip-signature", archive)
    assert verified.returncode == 0 and "verdict (INCONCLUSIVE)" in verified.stdout
    import zipfile

    with zipfile.ZipFile(archive) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/verdict.json"))
        stated = json.loads(zf.read(name))
    assert stated["schema"] == 3 and stated["verdict"] == "INCONCLUSIVE"
    assert "t2_async" in stated["inconclusive"] and stated["failed"] == []
    # a tampered verdict (INCONCLUSIVE turned FAIL) is caught by the recomputation
    # (SHA256SUMS rewritten to match: the archive is unsigned, so only the recomputation
    # can catch it)
    tampered = tmp_path / "tampered.zip"
    forged = json.dumps({**stated, "verdict": "FAIL"}).encode()
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tampered, "w") as dst:
        old = hashlib.sha256(src.read(name)).hexdigest()
        for item in src.infolist():
            data = src.read(item)
            if item.filename == name:
                data = forged
            elif item.filename.endswith("/SHA256SUMS"):
                data = data.replace(old.encode(), hashlib.sha256(forged).hexdigest().encode())
            dst.writestr(item, data)
    forged_run = run_cli("verify", "--skip-signature", tampered)
    assert forged_run.returncode == 3 and "verdict.json: field verdict" in forged_run.stderr
    ok = run_cli("gate", "protocols/ci_gate.yaml", "--seeds", "100", "--offset", "5000000",
                 "--out", out, "--no-sign", "--allow-inconclusive", "--inconclusive-ok")  # fmt: skip
    assert ok.returncode == EXIT_PASS, ok.stderr[-2000:]
    assert "gate: INCONCLUSIVE accepted (--inconclusive-ok)" in ok.stdout


def test_schema2_archive_without_evidence_still_verifies_as_fail():
    # Written before INCONCLUSIVE: its verdict.json says FAIL for a deciding test without
    # evidence; verify reads it under schema 2 and it stays valid.
    archive = next(Path(ROOT, "docs/evidence/peers/negative-controls").glob("peers_vllm-*.zip"))
    done = run_cli("verify", "--skip-signature", archive)
    assert done.returncode == 0, done.stderr
    assert "verdict (FAIL)" in done.stdout
