"""`specconform report`, JUnit XML and the CI step summary, on real archives: the shipped
ci_gate protocol run by the real evaluator on samples from exact synthetic laws
(tests/toolkit/fixtures/distribution_run.py), clean and with planted bugs."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import report_command
from specconform.details.cases import QuadratureCaseDetail
from specconform.evidence import read_archive
from specconform.report import (
    append_step_summary,
    html_report,
    junit_xml,
    markdown_report,
    step_summary_markdown,
)
from specconform.report.model import acceptance_point, check_cell, outcome, pvalue_text
from specconform.results import TestRow
from tests.toolkit.fixtures import distribution_run as real

PRIMARY_ID = "ci_gate-00000000-20250101T000000"
REPLICATION_ID = "ci_gate-00000000-20250202T000000"
OVERLAP_ID = "ci_gate-00000000-20250303T000000"


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """primary: clean, seeds [0, 2000). replication: disjoint seeds, the target built at
    temperature 0.8 (t2 noncentrality ~80 over ~40 df at 2,000 seeds: Holm rejects
    t2_async with power ~1) and 2 async engine errors. overlap: clean, seeds [1000, 3000)."""
    base = tmp_path_factory.mktemp("archives")
    return {
        "primary": real.build_archive(base / "p", PRIMARY_ID),
        "replication": real.build_archive(
            base / "r",
            REPLICATION_ID,
            offset=100_000,
            mutant="target_temperature",
            rng_seed=2,
            errors=2,
        ),
        "overlap": real.build_archive(base / "o", OVERLAP_ID, offset=1000, rng_seed=3),
    }


@pytest.fixture(scope="module")
def primary(archives):
    return archives["primary"]


@pytest.fixture(scope="module")
def disjoint(archives):
    return archives["replication"]


def _rows(path):
    return {r.test: r for r in read_archive(path).evaluation().tests}


def _section(markdown: str, heading: str) -> list[str]:
    """The table lines right after `heading` (up to the first blank line after it)."""
    lines = markdown.splitlines()
    start = lines.index(heading) + 2
    end = lines.index("", start)
    return lines[start:end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


# --- the archives are what the evaluator wrote -------------------------------------------


def test_fixture_archives_verify_and_state_their_verdicts(primary, disjoint):
    for path, verdict in ((primary, "PASS"), (disjoint, "FAIL")):
        done = subprocess.run(
            [sys.executable, "-m", "specconform", "verify", str(path), "--skip-signature"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert read_archive(path).evaluation().verdict.verdict == verdict
    reasons = dict(read_archive(disjoint).evaluation().verdict.reasons)
    assert reasons["t2_async"] == "p_Holm < 0.005" and reasons["engine_errors"] == "engine errors"


# --- Markdown ------------------------------------------------------------------------


def test_formal_checks_put_primary_and_replication_side_by_side(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    table = _section(markdown, "### Formal checks")
    header = _cells(table[0])
    # Labels come from the runs (issue 15): the second archive is a mutant run.
    assert header == [
        "test",
        "role",
        f"primary `{PRIMARY_ID}`",
        f"mutant target_temperature `{REPLICATION_ID}`",
    ]
    rows = {_cells(line)[0]: _cells(line) for line in table[2:]}
    assert list(rows) == list(_rows(primary))
    assert rows["t2_async"][2].endswith("PASS") and rows["t2_async"][3].endswith("FAIL")
    # A deciding row shows its raw p and its Holm-adjusted p.
    assert rows["t2_async"][2].startswith("p=") and "p_Holm=" in rows["t2_async"][2]
    # t1 over four seed-sharing groups (ci_gate combines them by Simes, issue 32): the
    # combined p is named p_Simes, each group's p shown.
    t1 = rows["t1_speculative"][2]
    assert t1.startswith("p_Simes=") and all(
        f"{g} p=" in t1 for g in ("sync", "async", "sync_d1", "async_d1")
    )
    assert rows["t3_async"][2].endswith("no evidence")  # never PASS without evidence
    assert "| verdict | **PASS** | **FAIL** |" in markdown


def test_per_group_tables_for_rows_that_carry_a_group(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    table = _section(markdown, "### Group `async`")
    names = [_cells(line)[0] for line in table[2:]]
    assert {"t2_async", "joint_async", "acceptance_async"} <= set(names)
    t2 = next(line for line in table[2:] if _cells(line)[0] == "t2_async")
    assert "df=" in t2 and "n=" in t2


def test_seed_ranges_disjoint_and_overlapping(archives):
    markdown = markdown_report([archives["primary"], archives["replication"]], details=True)
    assert "The seed ranges of the archives are disjoint" in markdown
    assert "NOT disjoint" not in markdown
    markdown = markdown_report([archives["primary"], archives["overlap"]], details=True)
    statement = next(line for line in markdown.splitlines() if "NOT disjoint" in line)
    # Each archive's label comes from its run (report/context.py); the ranges are named.
    assert "async [0, 2000) and " in statement and " async [1000, 3000)" in statement


def test_coverage_scope_and_archive_digests(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    assert any(
        line.startswith("- primary, t2_async: ") and "strata cover" in line
        for line in markdown.splitlines()
    )
    assert (
        "false-fail rate ≤ 0.01: Holm at 0.005 over 10 tests, 0.005 reserved for real numerics"
        in markdown
    )
    archives = _section(markdown, "### Archives")
    for line, path in zip(archives[2:], (primary, disjoint), strict=True):
        assert f"`{hashlib.sha256(path.read_bytes()).hexdigest()}`" in line
    assert "specconform verify" in markdown  # the report says it did not verify


# --- HTML ----------------------------------------------------------------------------


def test_html_has_inline_svg_plots_and_is_byte_identical(primary, disjoint):
    first = html_report([primary, disjoint])
    assert first == html_report([primary, disjoint])
    assert first.count("<svg") >= 3  # p-values, observed vs expected, acceptance
    assert "<dc:date>" not in first and "<?xml" not in first
    # The acceptance figure reads keys the real evaluator writes (it used to appear only
    # for a toy fixture's keys).
    assert "Acceptance ratios" in first


def test_acceptance_point_is_typed_from_real_rows(primary):
    point = acceptance_point(_rows(primary)["acceptance_async"])
    assert point is not None and 0 < point.observed < 1 and 0 < point.expected < 1
    assert abs(point.observed - point.expected) < 0.05  # exact law, ~2,000 samples
    assert acceptance_point(_rows(primary)["t2_async"]) is None


def test_html_is_byte_identical_in_a_fresh_process(primary, disjoint):
    code = (
        "import sys; from pathlib import Path; from specconform.report import html_report;"
        "sys.stdout.write(html_report([Path(a) for a in sys.argv[1:]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(primary), str(disjoint)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == html_report([primary, disjoint])


# --- CLI -----------------------------------------------------------------------------


def test_report_command_writes_markdown_and_html(tmp_path, primary, disjoint):
    out = tmp_path / "out" / "report.md"
    result = CliRunner().invoke(report_command, [str(primary), str(disjoint), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == markdown_report([primary, disjoint])  # default: PR-sized
    result = CliRunner().invoke(report_command, [str(primary), "--format", "html"])
    assert result.exit_code == 0 and result.stdout.startswith("<!DOCTYPE html>")


def test_report_command_errors_leave_no_output(tmp_path, primary):
    out = tmp_path / "report.md"
    result = CliRunner().invoke(
        report_command, [str(primary), str(tmp_path / "missing.zip"), "--out", str(out)]
    )
    assert result.exit_code == 2 and "not found" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"junk")
    result = CliRunner().invoke(report_command, [str(junk), "--out", str(out)])
    assert result.exit_code == 3 and not out.exists()


# --- JUnit and step summary ----------------------------------------------------------


def _junit(path):
    tests = list(read_archive(path).evaluation().tests)
    xml = junit_xml(tests, "ci_gate")
    assert xml == junit_xml(tests, "ci_gate")
    (suite,) = ET.fromstring(xml).findall("testsuite")
    return tests, suite, {c.get("name"): c for c in suite.findall("testcase")}


def test_junit_fails_only_deciding_tests(disjoint):
    tests, suite, cases = _junit(disjoint)
    assert list(cases) == [t.test for t in tests]
    failed = {n for n, c in cases.items() if c.find("failure") is not None}
    verdict = read_archive(disjoint).evaluation().verdict
    assert failed == set(verdict.failed)  # one <failure> per failed deciding test, no more
    assert suite.get("failures") == str(len(verdict.failed))
    # The planted bug also fails secondary rows (t2_sync, ...): shown, skipped, never red.
    secondary_fail = [t.test for t in tests if not t.deciding and t.status == "FAIL"]
    assert secondary_fail and all(cases[n].find("skipped") is not None for n in secondary_fail)
    assert cases["engine_errors"].find("failure").get("message") == "engine errors"


def test_junit_no_evidence_deciding_test_is_an_inconclusive_error_never_pass():
    row = TestRow(
        "t2_async",
        "primary",
        0.0,
        0,
        None,
        0,
        0.01,
        False,
        status="NO_EVIDENCE",
        deciding=True,
        reason="no evidence",
    )
    info = TestRow("t3_async", "exploratory", 0.0, 0, None, 0, 0.01, None, status="NO_EVIDENCE")
    (suite,) = ET.fromstring(junit_xml([row, info], "x")).findall("testsuite")
    first, second = suite.findall("testcase")
    # INCONCLUSIVE, not a failure of the engine: an <error>, counted as one
    assert first.find("failure") is None
    assert first.find("error").get("message") == "inconclusive: no evidence"
    assert first.find("error").get("type") == "Inconclusive"
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    assert "PASS" not in ET.tostring(suite, encoding="unicode")
    assert second.find("skipped") is not None and second.find("failure") is None
    assert outcome(row) == outcome(info) == "no evidence"


def test_step_summary_and_append(tmp_path, disjoint):
    summary = step_summary_markdown(disjoint)
    assert "**FAIL**" in summary and "t2_async (p_Holm < 0.005)" in summary
    assert "engine_errors (engine errors)" in summary
    assert (
        "false-fail rate ≤ 0.01: Holm at 0.005 over 10 tests, 0.005 reserved for real numerics"
        in summary
    )
    assert hashlib.sha256(disjoint.read_bytes()).hexdigest() in summary
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert append_step_summary(summary, {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "earlier step\n" + summary
    assert append_step_summary(summary, {}) is None


def test_a_deterministic_check_shows_its_statistic():
    # The quadrature case's detail, read back as a deterministic check: errors and bounds
    # of the exact law (the cell shows the largest error over its bound, 0.25).
    detail = {
        "statistic": "max error / bound",
        "grid": 64,
        "bound_first": 0.006,
        "bound_bonus": 0.006,
        "bound_k0": 0.003,
        "max_abs_error_first": 0.0015,
        "max_abs_error_bonus": 0.001,
        "max_abs_error_k0": 0.0005,
        "zero_mass_commits": 0,
        "kernel_errors": 0,
        "tokens_out_of_range": 0,
        "tv_pq": 0.2,
        "expected": ((0, 0.5),),
        "observed_first": (0.5,),
    }
    # TestRow's fields: test, role, statistic, df, pvalue, n, alpha, passed.
    case = TestRow("case", "case", 0.25, None, None, 10, 0.0, True, QuadratureCaseDetail(**detail))
    assert check_cell(case) == "max err/bound=0.25 PASS"
    other = TestRow("out_of_support", "primary", 0.0, None, None, 10, 0.01, True)
    assert check_cell(other) == "stat=0 PASS"
    assert check_cell(None) == "—"
    assert pvalue_text(other) == "p=n/a"
