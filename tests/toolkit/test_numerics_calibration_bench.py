"""bench/calibration_real_engine.py's table (issue 32, part 2): the verdict's false-fail
rate with its Clopper-Pearson 95% upper bound, read from the per-run CSV.

Checked against the issue's own figures (ci_gate 4 FAILs in 219 real-engine null runs:
95% interval 0.50-4.61%) and scipy's exact interval; no statistical threshold is drawn
here (the numbers are deterministic functions of the counts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.script_loader import load_bench


def _csv(tmp_path: Path, fails: int, runs: int) -> Path:
    path = tmp_path / "runs.csv"
    rows = ["offset,verdict,failed,inconclusive,near_ties,seconds,device"]
    for r in range(runs):
        failed = "isolation_async" if r < fails else ""
        rows.append(f"{r * 1000},{'FAIL' if failed else 'PASS'},{failed},,0,1.0,cpu")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_upper_bound_matches_the_issue_figures(tmp_path):
    bench = load_bench("calibration_real_engine")
    text = bench.render(_csv(tmp_path, 4, 219), Path("protocols/ci_gate.yaml"), 0.01, True)
    assert "| verdict FAIL | 4 / 219 | 0.0183 | 0.0461 |" in text
    assert "| isolation_async failed | 4 / 219 |" in text
    assert "upper bound 0.0461 > alpha 0.01" in text  # the issue's finding: not calibrated


def test_zero_fails_bound_and_the_alpha_statement(tmp_path):
    bench = load_bench("calibration_real_engine")
    rows = bench.summary(__import__("pandas").read_csv(_csv(tmp_path, 0, 500)), 0.01)
    what, k, n, rate, upper = rows[0]
    assert (what, k, n, rate) == ("verdict FAIL", 0, 500, 0.0)
    assert upper == pytest.approx(1 - 0.025 ** (1 / 500))  # exact CP bound at k = 0
    assert upper < 0.01  # 500 clean runs can show the rate below alpha 0.01
    text = bench.render(_csv(tmp_path, 0, 500), Path("p.yaml"), 0.01, True)
    assert "upper bound 0.0074 <= alpha 0.01" in text


def test_seed_span_makes_runs_disjoint():
    bench = load_bench("calibration_real_engine")
    # ci_gate: groups at offset + [0, 2000) and nospec at offset + 1,000,000 + [0, 2000)
    assert bench.seed_span(ROOT / "protocols" / "ci_gate.yaml") == 1_002_000


def _carry():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import calibration_carry

    return calibration_carry


OLD_GATE = ROOT / "docs" / "evidence" / "calibration" / "ci_gate_25ebee167f55.yaml"


def test_carry_only_across_a_larger_numerics_reserve(tmp_path):
    """PASS rows carry from the file before the reserve (only verdict.numerics_reserve
    differs, and it grew); any other difference, or a smaller reserve, refuses."""
    carry = _carry()
    # ci_gate's score tests draw 1,999 Monte Carlo samples at 0.01 and 3,999 at 0.005:
    # their p-values differ, so its runs never carry (the premise is the same p-values)
    new = ROOT / "protocols" / "ci_gate.yaml"
    with pytest.raises(SystemExit, match="1999 Monte Carlo samples .* 3999"):
        carry.carry_reason(OLD_GATE, new)
    without_score = OLD_GATE.read_text().replace("type: joint_score", "type: joint")
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(without_score)
    new.write_text(
        without_score.replace(
            "verdict: {combine: holm, alpha: 0.01}",
            "verdict: {combine: holm, alpha: 0.01, numerics_reserve: 0.005}",
        )
    )
    assert carry.carry_reason(old, new).startswith("carried ")
    with pytest.raises(SystemExit, match="below the old"):
        carry.carry_reason(new, old)  # backwards: a PASS at 0.005 says nothing at 0.01
    other = tmp_path / "other.yaml"
    other.write_text(without_score.replace("count: 2000", "count: 1999"))
    with pytest.raises(SystemExit, match="differ in seeds"):
        carry.carry_reason(other, new)


def test_carried_rows_are_the_passes_not_yet_run(tmp_path):
    carry = _carry()
    rows = carry.carried_rows(_csv(tmp_path, 2, 6), "carried x", "abc", done={5000})
    # rows 0 and 1 FAILed (re-run, not carried); 5000 is already in the new CSV
    assert [r["offset"] for r in rows] == [2000, 3000, 4000]
    assert {r["source"] for r in rows} == {"carried x"}
    assert {r["verdict"] for r in rows} == {"PASS"}
