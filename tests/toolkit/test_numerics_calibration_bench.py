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
