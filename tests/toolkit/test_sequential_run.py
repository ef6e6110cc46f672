"""`specconform run --sequential`: the anytime-valid mode end to end, and its parts.

End to end (the real CLI on the bundled engine, tiny preset, the fixture protocol
tests/toolkit/fixtures/sequential_protocol.yaml: 3 groups, budget 300 seeds per group,
batches of 50): the clean engine PASSes at the budget; a planted bug FAILs before it
(the negative control); both archives verify; a tampered trajectory, verdict or stopping
point does not. Then the bad-input refusals, and unit tests of the e-process on the
run's sparse reference laws against a by-hand oracle and of the batch stopping rule.

Thresholds: the e-process FAILs at 1/alpha = 100 (alpha = 0.01). The clean run's FAIL
probability is <= 0.01 by Ville's inequality; seeds are fixed, so the run is
deterministic and its PASS is a fixed fact, not a flaky draw. The planted bug
(`residual_from_p`: corrections from p instead of (p - q)+) puts mass on joint cells of
probability 0, and one such observation makes E infinite: in the simulation of
docs/calibration.md the median is 5 seeds and 100/100 replications FAIL within 5,000, so
the first batch of 50 catches it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specconform.calibration import make_world, simulate
from specconform.evidence import seal
from specconform.kinds.distribution.sequential import DETERMINISTIC_ROWS, evaluate_sequential
from specconform.protocol.load import load_protocol
from specconform.report import junit_xml
from specconform.results import TestRow
from specconform.stats.eprocess import KT, group_log_e, sequential_test, stopping_point
from specconform.stats.reference import Reference
from tests.toolkit.cli_helpers import ROOT, run_cli

PROTOCOL = ROOT / "tests/toolkit/fixtures/sequential_protocol.yaml"
BUDGET, BATCH = 300, 50


def _run(out: Path, *extra) -> tuple[object, Path]:
    proc = run_cli("run", PROTOCOL, "--out", out, "--no-sign", *extra)
    archives = sorted(out.glob("*.zip"))
    return proc, (archives[0] if archives else out / "missing.zip")


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("clean"))


@pytest.fixture(scope="module")
def bug(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("bug"), "--mutant", "residual_from_p")


def _run_dir(archive: Path) -> Path:
    return archive.with_name(archive.name.removesuffix(".zip"))


def _tests(archive: Path) -> list[TestRow]:
    rows = json.loads((_run_dir(archive) / "results/tests.json").read_text())
    return [TestRow.from_json(r) for r in rows]


def _eprocess(archive: Path) -> TestRow:
    return next(t for t in _tests(archive) if t.test == "sequential_eprocess")


def test_clean_engine_passes_at_the_budget(clean):
    proc, archive = clean
    assert proc.returncode == 0, proc.stderr
    assert "result: PASS" in proc.stdout
    row = _eprocess(archive)
    assert row.status == "PASS" and row.deciding and row.n == BUDGET
    assert row.detail.seeds_used == BUDGET and row.detail.batches_run == BUDGET // BATCH
    # Never reached 1/alpha at any batch end.
    assert all(p.sup_log_e < math.log(100) for p in row.detail.trajectory)
    # Every fixed-N statistical row is informational and says why; the deterministic
    # rows (valid under any stopping) still decide, and pass.
    others = [t for t in _tests(archive) if t.test != "sequential_eprocess"]
    statistical = [t for t in others if t.test not in DETERMINISTIC_ROWS]
    assert statistical and all(t.status == "INFO" and not t.deciding for t in statistical)
    assert all("optional stopping" in t.reason for t in statistical)
    certain = [t for t in others if t.test in DETERMINISTIC_ROWS]
    assert {t.test for t in certain} == set(DETERMINISTIC_ROWS)
    assert all(t.deciding and t.status == "PASS" for t in certain)
    run = json.loads((_run_dir(archive) / "run.json").read_text())
    assert run["sequential"] == {
        "alpha": 0.01,
        "batch": BATCH,
        "batches_run": BUDGET // BATCH,
        "budget": BUDGET,
        "seeds_used": BUDGET,
        "verdict": "PASS",
    }
    protocol = json.loads((_run_dir(archive) / "protocol.json").read_text())
    assert protocol["sequential"] == {"batch": BATCH}
    samples = pd.read_csv(_run_dir(archive) / "raw/samples.csv")
    assert samples.groupby("group").size().to_dict() == {
        "async": BUDGET,
        "async_d1": BUDGET,
        "nospec": BUDGET,
    }
    assert not (_run_dir(archive) / "results/plan.json").exists()


def test_planted_bug_fails_before_the_budget(bug):
    # Negative control: the same mode and protocol on a wrong engine must FAIL, and must
    # stop early (seeds used < budget), or the sequential mode would save nothing.
    proc, archive = bug
    assert proc.returncode == 1, proc.stderr
    assert "result: FAIL" in proc.stdout
    row = _eprocess(archive)
    assert row.status == "FAIL" and row.n < BUDGET
    assert row.detail.seeds_used == row.n == BATCH  # the first batch end
    assert row.pvalue == 0.0  # an impossible joint cell: E infinite
    samples = pd.read_csv(_run_dir(archive) / "raw/samples.csv")
    assert samples.groupby("group").size().eq(BATCH).all()
    # JUnit: only the e-process can be a <failure>.
    xml = junit_xml(_tests(archive), "seq")
    assert xml.count("<failure") == 1 and 'name="sequential_eprocess"' in xml
    trajectory = list(
        csv.DictReader(io.StringIO((_run_dir(archive) / "results/sequential.csv").read_text()))
    )
    assert [r["seeds"] for r in trajectory] == [str(BATCH)] and trajectory[0]["log_e"] == ""


def test_an_impossible_t3_fails_a_sequential_run_the_eprocess_cannot_see(tmp_path):
    # Negative control of the deterministic rows: bonus_params draws every speculative t3
    # from the unfiltered law (out of top-k's support with probability ~0.004 per t3 on
    # this preset; at 300 seeds x 2 speculative groups P(no impossible t3) ~ 0.08 -- the
    # seed range is fixed, so the outcome is deterministic, and here it has some). The
    # e-process watches t1 and t2 only, so it runs to the budget; out_of_support fails.
    proc, archive = _run(tmp_path, "--mutant", "bonus_params")
    assert proc.returncode == 1, proc.stderr
    rows = {t.test: t for t in _tests(archive)}
    assert rows["sequential_eprocess"].status == "PASS"
    assert rows["sequential_eprocess"].n == BUDGET
    assert rows["out_of_support"].status == "FAIL" and rows["out_of_support"].deciding
    verdict = json.loads((_run_dir(archive) / "verdict.json").read_text())
    assert verdict["verdict"] == "FAIL" and verdict["failed"] == ["out_of_support"]
    assert run_cli("verify", "--skip-signature", archive).returncode == 0


@pytest.mark.parametrize("which", ["clean", "bug"])
def test_verify_round_trip(which, request):
    _, archive = request.getfixturevalue(which)
    proc = run_cli("verify", "--skip-signature", archive)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "recomputed:" in proc.stdout


def _tampered(archive: Path, tmp_path: Path, edit) -> Path:
    run_dir = tmp_path / _run_dir(archive).name
    shutil.copytree(_run_dir(archive), run_dir)
    for name in ("SHA256SUMS", "UNSIGNED"):
        (run_dir / name).unlink(missing_ok=True)
    edit(run_dir)
    return seal(run_dir, key=None, sign=False)  # digests re-made: only recomputation can tell


def _replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _drop_last_batch(run_dir: Path) -> None:
    path = run_dir / "raw/samples.csv"
    samples = pd.read_csv(path)
    start = samples.groupby("group")["seed"].transform("min")
    samples[samples["seed"] - start < BUDGET - BATCH].to_csv(path, index=False)


def _edit_trajectory(run_dir: Path) -> None:
    path = run_dir / "results/sequential.csv"
    lines = path.read_text().splitlines()
    batch, seeds, log_e, sup = lines[2].split(",")
    lines[2] = ",".join([batch, seeds, repr(float(log_e) + 1.0), sup])
    path.write_text("\n".join(lines) + "\n")


def _claim_fail(run_dir: Path) -> None:
    _replace_in(run_dir / "verdict.json", '"verdict": "PASS"', '"verdict": "FAIL"')


@pytest.mark.parametrize(
    "edit, message",
    [
        (_edit_trajectory, "results/sequential.csv"),
        (_claim_fail, "verdict.json"),
        # A run that stopped one batch early without the e-process crossing.
        (_drop_last_batch, "batch rule"),
    ],
)
def test_tampered_clean_run_is_caught(clean, tmp_path, edit, message):
    _, archive = clean
    proc = run_cli("verify", "--skip-signature", _tampered(archive, tmp_path, edit))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr


def test_tampered_stopping_point_is_caught(bug, tmp_path):
    # Claim the failing run stopped later than it did: its seeds count is edited in the
    # stated row; the recomputed stop (the first batch) differs.
    _, archive = bug

    def edit(run_dir: Path) -> None:
        path = run_dir / "results/tests.json"
        rows = json.loads(path.read_text())
        assert rows[0]["detail"]["seeds_used"] == BATCH
        rows[0]["detail"]["seeds_used"] = 2 * BATCH
        path.write_text(json.dumps(rows, indent=2, sort_keys=True))

    proc = run_cli("verify", "--skip-signature", _tampered(archive, tmp_path, edit))
    assert proc.returncode == 3 and "seeds_used" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["protocols/quadrature.yaml", "--sequential"], "applies to distribution protocols"),
        ([PROTOCOL, "--sequential", "--batch", "0"], "between 1 and the budget"),
        ([PROTOCOL, "--sequential", "--batch", "301"], "between 1 and the budget"),
        (["protocols/ci_gate.yaml", "--batch", "10"], "applies only with --sequential"),
        ([PROTOCOL, "--sequential", "--nproc", "2"], "drop --nproc"),
        ([PROTOCOL, "--nproc", "2"], "drop --nproc"),  # pre-registered, no flag
        ([PROTOCOL, "--sequential", "--resume", "somewhere"], "does not resume"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    proc = run_cli("run", *args, "--out", out, "--no-sign")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not out.exists()


# --- units: the e-process on sparse laws, the stopping rule, the evaluator ---------------


def _oracle_log_e(ref: dict, frame: pd.DataFrame, depth: int | None) -> np.ndarray:
    """The definition, one observation at a time with Python dicts: factor q̂(x)/p0(x),
    q̂ = (earlier count of x in the stratum + ½ C p0(x)) / (earlier in stratum + ½ C)."""
    counts: dict = {}
    total, out = 0.0, []
    for _, r in frame.sort_values("seed").iterrows():
        t1, t2 = int(r["t1"]), int(r["t2"])
        p1 = {int(k): v for k, v in ref["p_t1"].items() if v > 0}
        p = {int(k): v for k, v in ref["p_t2"].get(str(t1), {}).items() if v > 0}
        if depth is None:
            cells, x = p, t2
        else:
            q = {int(k): v for k, v in ref["q_t2"][str(depth)].get(str(t1), {}).items()}
            tokens = set(p) | set(q)
            cells = {(t, 1): min(p.get(t, 0), q.get(t, 0)) for t in tokens}
            cells.update({(t, 0): max(p.get(t, 0) - q.get(t, 0), 0.0) for t in tokens})
            mass = sum(cells.values())
            cells = {k: v / mass for k, v in cells.items() if v > 0}
            x = (t2, int(r["first_accepted"] == 1))
        for stratum, law, cell in (("t1", p1, t1), (t1, cells, x)):
            c = len(law)
            seen = counts.setdefault(stratum, {})
            n = sum(seen.values())
            p0 = law.get(cell, 0.0)
            if p0 == 0:
                total = math.inf
            else:
                total += math.log((seen.get(cell, 0) + KT * c * p0) / (n + KT * c) / p0)
            seen[cell] = seen.get(cell, 0) + 1
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("mutant", [None, "greedy_draft"])
@pytest.mark.parametrize("group, depth", [("nospec", None), ("async", 2), ("async_d1", 1)])
def test_group_log_e_on_sparse_laws_matches_the_definition(mutant, group, depth):
    world = make_world(0)
    groups = load_protocol(PROTOCOL).data["groups"]
    samples = simulate(world, 150, np.random.default_rng(11), groups=groups, mutant=mutant)
    frame = samples[samples["group"] == group]
    got = group_log_e(Reference(world.reference), frame, depth)
    want = _oracle_log_e(world.reference, frame, depth)
    assert np.allclose(got, want, rtol=1e-10, atol=1e-10)


def test_impossible_token_makes_the_path_infinite():
    world = make_world(0)
    groups = load_protocol(PROTOCOL).data["groups"]
    samples = simulate(world, 20, np.random.default_rng(3), groups=groups)
    frame = samples[samples["group"] == "nospec"].copy()
    frame.iloc[5, frame.columns.get_loc("t2")] = 10**6  # outside every support
    path = group_log_e(Reference(world.reference), frame, None)
    assert np.isfinite(path[:5]).all() and np.isinf(path[5:]).all()


def test_stopping_rule_reads_the_sup_up_to_each_batch_end():
    threshold = math.log(100)
    path = np.array([0.0, 1.0, threshold + 0.1, 0.5, 0.2, 0.1, 0.0])  # crosses at seed 3
    stop = stopping_point(path, 0.01, budget=7, batch=2)
    assert stop.crossed and stop.seeds == 4  # the end of the batch where it crossed
    assert [p.seeds for p in stop.trajectory] == [2, 4]
    assert stop.trajectory[-1].log_e == 0.5 and stop.trajectory[-1].sup_log_e == threshold + 0.1
    calm = stopping_point(np.zeros(7), 0.01, budget=7, batch=3)
    assert not calm.crossed and calm.seeds == 7  # batch ends 3, 6 and the short last one
    assert [p.seeds for p in calm.trajectory] == [3, 6, 7]
    running = stopping_point(np.zeros(4), 0.01, budget=7, batch=3)
    assert not running.crossed and running.seeds == 3


def _protocol(batch: int) -> dict:
    data = load_protocol(PROTOCOL).data
    data["sequential"] = {"batch": batch}
    return data


def test_evaluator_refuses_a_run_that_went_on_after_crossing():
    # greedy_draft on the exact synthetic laws crosses 1/alpha within 300 seeds (checked
    # here: the e-process FAILs on the samples up to its stop); the full 300 seeds then
    # claim a run that continued past its stopping point.
    world = make_world(0)
    proto = _protocol(10)
    samples = simulate(
        world, 300, np.random.default_rng(5), groups=proto["groups"], mutant="greedy_draft"
    )
    ref = Reference(world.reference)
    with pytest.raises(ValueError, match="batch rule"):
        evaluate_sequential(proto, samples, ref)
    path_stop = stopping_point(sequential_test(proto, ref, samples).log_e, 0.01, 300, 10)
    assert path_stop.crossed and path_stop.seeds < 300
    start = samples.groupby("group")["seed"].transform("min")
    stopped = samples[samples["seed"] - start < path_stop.seeds]
    ev = evaluate_sequential(proto, stopped, ref)
    assert ev.verdict.verdict == "FAIL" and ev.tests[0].n == path_stop.seeds


def test_reports_show_the_sequential_verdict(bug):
    from specconform.report import html_report, markdown_report

    _, archive = bug
    md = markdown_report([archive])
    assert "### Sequential verdict" in md and "1/alpha = 100" in md
    assert f"{BATCH} of {BUDGET} seeds per group used" in md
    assert "| 1 | 50 | inf | inf | inf |" in md  # the trajectory: one batch, E infinite
    assert "optional stopping" in md
    html = html_report([archive])
    assert "Sequential verdict" in html and 'id="seq-0' in html  # the log E plot
