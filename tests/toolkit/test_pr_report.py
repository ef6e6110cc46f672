"""`specconform report --pr` (issue 14, part 5): one Markdown page for a pull request.

The committed example (docs/pr-report-example.md) is rebuilt here from the committed
archives it was generated from (docs/evidence/pr-example/), so the page in docs/ is
always what the command writes; kinds without a section of their own (mcnemar and
sequence, being written now) render through the generic rows table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specconform.cli.evidence import report_command
from specconform.evidence import seal
from specconform.evidence.sha256sums import sha256_file
from specconform.report.pr import human_size, pr_markdown
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.fixtures import evidence_toy as toy

EXAMPLE = ROOT / "docs" / "pr-report-example.md"
EVIDENCE = ROOT / "docs" / "evidence" / "pr-example"
# The archives in the order the example was generated from (its header says how): the
# ci_gate primary (offset 0) before its replication (--offset 3000000).
ORDER = (
    "quadrature-30dde5fd-0f25bc1e.zip",
    "ci_gate-eba63360-463275bc.zip",
    "ci_gate-eba63360-29cc5a7d.zip",
    "equality-3b0fbc18-b4384ff0.zip",
    "ci_performance-517db5c1-3106cb95.zip",
)
PUBKEY = EVIDENCE / "pr.pub"


def example_archives() -> list[Path]:
    return [EVIDENCE / name for name in ORDER]


def example_page(text: str) -> str:
    """The generated page: the example file less its leading HTML comment."""
    head, sep, page = text.partition("-->\n\n")
    assert head.startswith("<!--") and sep, "docs/pr-report-example.md lost its header"
    return page


def test_committed_example_is_what_the_command_writes():
    archives = example_archives()
    # With the key: every archive verified in full (digests, signature, recomputation).
    page = pr_markdown(archives, pubkey=PUBKEY)
    assert page == example_page(EXAMPLE.read_text()), "regenerate it (see its header)"
    for section in (
        "## Test Result",
        "### Functional checks",
        "### Distribution",
        "### Performance",
        "### Evidence",
    ):
        assert section in page
    assert "| test | role | primary (cpu) | replication (cpu) |" in page
    for path in archives:
        assert sha256_file(path) in page and human_size(path.stat().st_size) in page


def _toy_archive(tmp_path: Path, name: str, kind: str, protocol: str) -> Path:
    run_dir = toy.build_run_dir(tmp_path / name, run_id=f"{protocol}-0123abcd-{name}")
    run = json.loads((run_dir / "run.json").read_text())
    run.update(kind=kind, protocol_name=protocol)
    (run_dir / "run.json").write_text(json.dumps(run))
    return seal(run_dir, key=None, sign=False)


@pytest.fixture
def mixed(tmp_path) -> list[Path]:
    return [
        _toy_archive(tmp_path, "a", "distribution", "gate"),
        _toy_archive(tmp_path, "b", "distribution", "gate"),
        _toy_archive(tmp_path, "c", "mcnemar", "gsm8k_smoke"),
        _toy_archive(tmp_path, "d", "sequence", "ci_sequence"),
    ]


def test_kinds_without_a_section_render_generically(mixed):
    page = pr_markdown(mixed)
    assert "### Quality (paired correctness, McNemar)" in page
    assert "### Kind `sequence`" in page
    assert page.index("### Quality") < page.index("### Kind `sequence`")
    assert "`gsm8k_smoke (primary)`: **PASS**" in page
    # The toy rows keep their facts: each row's test, p-values and detail scalars.
    assert page.count("| gof_async | primary |") == 3  # distribution, mcnemar, sequence
    # Distribution: the primary and the replication of one protocol side by side.
    assert "| test | role | primary (cpu) | replication (cpu) |" in page
    for path in mixed:
        assert f"`{path.name}`" in page and sha256_file(path) in page


def test_cli_writes_the_pr_page_for_mixed_kinds_and_in_html(mixed, tmp_path):
    done = CliRunner().invoke(report_command, [str(p) for p in mixed])
    assert done.exit_code == 0 and done.stdout.startswith("## Test Result")
    same_kind = CliRunner().invoke(report_command, [str(p) for p in mixed[:2]])
    assert same_kind.exit_code == 0 and "## Test Result" not in same_kind.stdout
    forced = CliRunner().invoke(report_command, ["--pr", *map(str, mixed[:2])])
    assert forced.stdout.startswith("## Test Result")
    html = CliRunner().invoke(report_command, ["--pr", "--format", "html", str(mixed[0])])
    assert html.exit_code == 0 and html.stdout.startswith("<!DOCTYPE html>")  # issue 36
    assert "<h2>Test Result</h2>" in html.stdout and "<table>" in html.stdout


def test_a_failing_archive_is_named_in_the_headline(tmp_path):
    bad = toy.build_run_dir(tmp_path / "bad", groups={"sync": toy.BAD, "async": toy.GOOD})
    archive = seal(bad, key=None, sign=False)
    page = pr_markdown([archive])
    assert "**1 FAIL**: toy (primary)" in page


def test_a_mutant_run_is_labelled_as_one_never_as_a_replication():
    """Issue 37: `report --pr` over a clean run and a planted-misuse run of the same
    protocol labelled the second "replication" (its position), which presents a
    negative control as independent confirming evidence. The committed peer archives: a
    clean vLLM run and its `wrong_temperature` negative control."""
    peers = ROOT / "docs" / "evidence" / "peers"
    clean = peers / "peers_vllm-13f20cee-32dabab3.zip"
    mutant = peers / "negative-controls" / "peers_vllm-13f20cee-a2ed0f6d-wrong_temperature.zip"
    page = pr_markdown([clean, mutant])
    assert "mutant wrong_temperature" in page
    assert "replication" not in page
