"""`specconform report`, JUnit XML and the CI step summary, on toy archives."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from specconform.cli_evidence import report_command
from specconform.evidence import read_archive, seal
from specconform.report import (
    append_step_summary,
    html_report,
    junit_xml,
    markdown_report,
    step_summary_markdown,
)
from tests.toolkit.fixtures import evidence_toy as toy

PRIMARY_ID = "toy-0123abcd-20250101T000000"
REPLICATION_ID = "toy-0123abcd-20250202T000000"
TESTS = ["gof_async", "gof_sync", "acceptance_rate", "t3_exploratory"]


@pytest.fixture
def primary(tmp_path):
    return seal(toy.build_run_dir(tmp_path / "p"), key=None, sign=False)


def _replication(tmp_path, seed_ranges, groups=None):
    run_dir = toy.build_run_dir(tmp_path / "r", run_id=REPLICATION_ID, groups=groups,
                                seed_ranges=seed_ranges)
    return seal(run_dir, key=None, sign=False)


@pytest.fixture
def disjoint(tmp_path):
    return _replication(tmp_path, {"sync": [100000, 102000], "async": [102000, 104000]},
                        groups={"sync": toy.BAD, "async": toy.GOOD})


@pytest.fixture
def overlapping(tmp_path):
    return _replication(tmp_path, {"sync": [1000, 3000], "async": [50000, 52000]})


def _section(markdown: str, heading: str) -> list[str]:
    """The table lines right after `heading` (up to the first blank line after it)."""
    lines = markdown.splitlines()
    start = lines.index(heading) + 2
    end = lines.index("", start)
    return lines[start:end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


# --- Markdown ------------------------------------------------------------------------

def test_formal_checks_put_primary_and_replication_side_by_side(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    table = _section(markdown, "### Formal checks")
    header = _cells(table[0])
    assert header == ["test", "role", f"primary `{PRIMARY_ID}`",
                      f"replication `{REPLICATION_ID}`"]
    assert set(table[1].replace("|", "").split()) == {"---"}
    rows = {_cells(line)[0]: _cells(line) for line in table[2:]}
    assert list(rows) == TESTS
    for cells in rows.values():
        assert len(cells) == 4
        assert all(c.startswith("p=") for c in cells[2:]), cells
    assert rows["gof_sync"][2].endswith("PASS") and rows["gof_sync"][3].endswith("FAIL")
    assert rows["gof_async"][3].endswith("PASS")
    assert rows["t3_exploratory"][1] == "exploratory"
    assert "| verdict | **PASS** | **FAIL** |" in markdown


def test_per_group_tables_for_rows_that_carry_a_group(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    for group in ("sync", "async"):
        table = _section(markdown, f"### Group `{group}`")
        assert len(table) == 3 and _cells(table[2])[0] == f"gof_{group}"
        assert "df=3" in table[2] and "n=2000" in table[2]


def test_seed_ranges_disjoint(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    table = _section(markdown, "### Seed ranges")
    assert _cells(table[2]) == ["async", "[2000, 4000)", "[102000, 104000)"]
    assert _cells(table[3]) == ["sync", "[0, 2000)", "[100000, 102000)"]
    assert "The seed ranges of the archives are disjoint" in markdown
    assert "NOT disjoint" not in markdown


def test_seed_ranges_overlapping_are_named(primary, overlapping):
    markdown = markdown_report([primary, overlapping], details=True)
    statement = next(line for line in markdown.splitlines() if "NOT disjoint" in line)
    assert "primary sync [0, 2000) and replication sync [1000, 3000)" in statement
    assert "primary async [2000, 4000) and replication sync [1000, 3000)" in statement
    assert "50000" not in statement


def test_single_archive_and_missing_seed_ranges(tmp_path, primary):
    assert "One archive" in markdown_report([primary], details=True)
    no_ranges = seal(toy.build_run_dir(tmp_path / "n", run_id=REPLICATION_ID, seed_ranges={}),
                     key=None, sign=False)
    assert "cannot be stated" in markdown_report([primary, no_ranges], details=True)


def test_coverage_scope_and_archive_digests(primary, disjoint):
    markdown = markdown_report([primary, disjoint], details=True)
    assert "- primary, gof_sync: samples_covered=1, strata=1" in markdown
    assert "not deciding (exploratory): t3_exploratory" in markdown
    archives = _section(markdown, "### Archives")
    for line, path in zip(archives[2:], (primary, disjoint), strict=True):
        assert f"`{hashlib.sha256(path.read_bytes()).hexdigest()}`" in line
        assert f"`{path.name}`" in line
    assert "specconform verify" in markdown  # the report says it did not verify


# --- HTML ----------------------------------------------------------------------------

def test_html_has_inline_svg_plots_and_is_byte_identical(primary, disjoint):
    first = html_report([primary, disjoint])
    assert first == html_report([primary, disjoint])
    assert first.count("<svg") >= 3  # p-values, observed vs expected, acceptance
    assert "<dc:date>" not in first and "<?xml" not in first
    assert "Observed vs expected" in first and "Acceptance ratios" in first
    assert "The seed ranges of the archives are disjoint" in first


def test_html_is_byte_identical_in_a_fresh_process(primary, disjoint):
    code = ("import sys; from pathlib import Path; from specconform.report import html_report;"
            "sys.stdout.write(html_report([Path(a) for a in sys.argv[1:]]))")
    done = subprocess.run([sys.executable, "-c", code, str(primary), str(disjoint)],
                          capture_output=True, text=True, check=True)
    assert done.stdout == html_report([primary, disjoint])


# --- CLI -----------------------------------------------------------------------------

def test_report_command_writes_markdown_and_html(tmp_path, primary, disjoint):
    out = tmp_path / "out" / "report.md"
    result = CliRunner().invoke(report_command, [str(primary), str(disjoint), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == markdown_report([primary, disjoint])
    result = CliRunner().invoke(report_command, [str(primary), "--format", "html"])
    assert result.exit_code == 0 and result.stdout.startswith("<!DOCTYPE html>")


def test_report_command_errors_leave_no_output(tmp_path, primary):
    out = tmp_path / "report.md"
    result = CliRunner().invoke(report_command,
                                [str(primary), str(tmp_path / "missing.zip"), "--out", str(out)])
    assert result.exit_code == 2 and "not found" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "p"]
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"junk")
    result = CliRunner().invoke(report_command, [str(junk), "--out", str(out)])
    assert result.exit_code == 3 and not out.exists()


# --- JUnit and step summary ----------------------------------------------------------

def test_junit_has_one_testcase_per_row_and_failures(disjoint):
    tests = list(read_archive(disjoint).evaluation().tests)
    xml = junit_xml(tests, "toy")
    assert xml == junit_xml(tests, "toy")
    root = ET.fromstring(xml)
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == TESTS
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("skipped") == "1"
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {"gof_sync"}
    skipped = {c.get("name") for c in cases if c.find("skipped") is not None}
    assert skipped == {"t3_exploratory"}


def test_step_summary_and_append(tmp_path, disjoint):
    summary = step_summary_markdown(disjoint)
    assert "**FAIL**" in summary and "Failed: gof_sync" in summary
    assert hashlib.sha256(disjoint.read_bytes()).hexdigest() in summary
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert append_step_summary(summary, {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "earlier step\n" + summary
    assert append_step_summary(summary, {}) is None


def test_a_deterministic_check_shows_its_statistic():
    from specconform.report.model import check_cell
    from specconform.results import TestRow

    row = TestRow(test="case", role="case", statistic=0.25, df=None, pvalue=None, n=10,
                  alpha=0.0, passed=True)
    assert check_cell(row) == "stat=0.25 PASS"
    assert check_cell(None) == "—"
