"""The PR-sized report: one screen of Markdown with labels from the runs, environment,
signature with key id and the seed pairs that matter; HTML with failing tests first, a
per-test grid, and a real browser rendering it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from specconform.evidence import seal
from specconform.evidence.signing import generate_key_pem
from specconform.report import html_report, markdown_report
from specconform.report.context import relabel, run_labels
from specconform.report.model import load_views
from specconform.util.errors import EvidenceError
from tests.toolkit.fixtures import evidence_toy as toy

ROOT = Path(__file__).resolve().parents[2]
FP32 = ROOT / "docs" / "evidence" / "fp32_t2-96c34d54-41ee4c6a.zip"
TOP = "fp32_t2-96c34d54-41ee4c6a"


def _variant(tmp_path: Path, name: str, **run_fields) -> Path:
    """The committed archive with run.json fields changed (reports do not verify, so a
    changed run.json stands in for a second real run of another configuration)."""
    members = toy.members(FP32)
    run = json.loads(members[f"{TOP}/run.json"])
    run.update(run_fields)
    return toy.rewrite_zip(
        FP32, tmp_path / f"{name}.zip", replace={f"{TOP}/run.json": json.dumps(run).encode()}
    )


def _toy(tmp_path: Path, name: str, run_id: str, *, key: Path | None = None, **kw) -> Path:
    return seal(
        toy.build_run_dir(tmp_path / name, run_id=run_id, **kw), key=key, sign=key is not None
    )


def test_default_markdown_of_two_real_archives_fits_one_screen(tmp_path):
    shifted = {
        g: [a + 10_000_000, b + 10_000_000]
        for g, (a, b) in json.loads(toy.members(FP32)[f"{TOP}/run.json"])["seed_ranges"].items()
    }
    replication = _variant(tmp_path, "replication", seed_ranges=shifted)
    markdown = markdown_report([FP32, replication])
    lines = markdown.splitlines()
    assert len(lines) <= 40, markdown
    assert "|  | A: primary | B: replication |" in lines
    assert "| commit | `50fb37661271 (dirty)` | `50fb37661271 (dirty)` |" in lines
    device = "cuda: 1x NVIDIA H200; torch 2.11.0+cu130, CUDA 13.0, triton 3.6.0"
    assert f"| device | {device} | {device} |" in lines
    assert any(
        line.startswith("| command | `specconform run protocols/fp32_t2.yaml --seeds 5000")
        for line in lines
    )
    assert "| signature | UNSIGNED | UNSIGNED |" in lines
    assert "Seeds: B vs A: disjoint seeds across all 5 groups" in lines
    assert max(len(line) for line in lines if not line.startswith("|")) < 300  # no paragraph
    details = markdown_report([FP32, replication], details=True)
    assert len(details.splitlines()) > 40 and "### Coverage and scope" in details


def test_a_replication_on_the_same_seeds_is_flagged(tmp_path):
    markdown = markdown_report([FP32, _variant(tmp_path, "again")])
    line = next(ln for ln in markdown.splitlines() if ln.startswith("Seeds: B vs A"))
    assert "NOT independent" in line and "nospec [3000000, 3005000)" in line


def test_within_archive_pairs_name_the_split(tmp_path):
    markdown = markdown_report([FP32])
    line = next(ln for ln in markdown.splitlines() if ln.startswith("Seeds: A two-sample"))
    assert "disjoint ranges async/nospec" in line
    assert "one range split into disjoint seeds async/sync" in line


def test_labels_come_from_the_runs_not_positions(tmp_path):
    mutant = _variant(tmp_path, "mutant", mutant="greedy_draft")
    candidate = _variant(tmp_path, "candidate", protocol_hash="cd" * 32)
    replication = _variant(tmp_path, "replication")
    named = _variant(tmp_path, "named", label="main@abc123")
    labels = run_labels(load_views([FP32, mutant, candidate, replication, named]))
    assert labels == ["base", "mutant greedy_draft", "candidate", "replication", "main@abc123"]
    # A mutant run first is not "primary" just because it comes first.
    assert run_labels(load_views([mutant, FP32])) == ["mutant greedy_draft", "primary"]
    other = _toy(tmp_path, "t", "toy-0123abcd-20250101T000000")
    assert [v.label for v in relabel(load_views([FP32, other]))] == [
        "fp32_t2 primary",
        "toy primary",
    ]


def test_signature_status_names_the_key_and_verifies_with_pubkey(tmp_path, monkeypatch):
    toy.install_toy_kind(monkeypatch)  # --pubkey verifies in full, recomputation included
    private, public = generate_key_pem()
    key, pub = tmp_path / "k.key", tmp_path / "k.pub"
    key.write_bytes(private)
    pub.write_bytes(public)
    signed = _toy(tmp_path, "s", "toy-0123abcd-20250101T000000", key=key)
    markdown = markdown_report([signed])
    assert "signed (key id " in markdown and "NOT verified: pass --pubkey" in markdown
    verified = markdown_report([signed], pubkey=pub)
    row = next(ln for ln in verified.splitlines() if ln.startswith("| signature"))
    assert (
        row.startswith("| signature | verified, key id ")
        and "Every archive was verified" in verified
    )
    _, other_public = generate_key_pem()
    wrong = tmp_path / "wrong.pub"
    wrong.write_bytes(other_public)
    with pytest.raises(EvidenceError, match="not by the given public key"):
        markdown_report([signed], pubkey=wrong)


def _good_bad(tmp_path):
    """A passing toy archive and a later one whose sync group draws from the bad law."""
    good = _toy(tmp_path, "p", "toy-0123abcd-20250101T000000")
    bad = _toy(
        tmp_path,
        "r",
        "toy-0123abcd-20250202T000000",
        groups={"sync": toy.BAD, "async": toy.GOOD},
        seed_ranges={"sync": [100000, 102000], "async": [102000, 104000]},
    )
    return good, bad


def test_many_deciding_tests_show_failing_ones_first(tmp_path):
    good, bad = _good_bad(tmp_path)
    markdown = markdown_report([good, bad])
    assert "| gof_sync | primary | p=" in markdown and "FAIL |" in markdown
    assert "Not deciding: 1 tests (exploratory); none fails." in markdown
    assert "| failed | none | gof_sync |" in markdown


# --- HTML ------------------------------------------------------------------------------


def _pair(tmp_path):
    pytest.importorskip("matplotlib")
    return _good_bad(tmp_path)


def test_html_puts_failing_tests_first_in_a_grid_and_has_no_literal_backticks(tmp_path):
    page = html_report(list(_pair(tmp_path)))
    tests_table = page[page.index("<h2>Tests (failing first)</h2>") :]
    assert tests_table.index("<td>gof_sync</td>") < tests_table.index("<td>gof_async</td>")
    assert '<tr class="failing"><td>gof_sync</td>' in page
    assert '<div class="grid">' in page and '<div class="card FAIL"><h3>gof_sync' in page
    assert "alpha = 0.01" in page  # the alpha line's legend in the p-value plot
    assert "`" not in page.split("</style>")[1].replace("<code>", "")  # footer rendered
    assert "<code>specconform verify ARCHIVE --pubkey KEY</code>" in page


def test_html_marks_clamped_pvalues(tmp_path):
    import math

    from specconform.report.plots import P_CLAMP, pvalue_plot

    good, bad = _pair(tmp_path)
    views = load_views([good, bad])
    p_bad = views[1].row("gof_sync").pvalue
    height = -math.log10(p_bad)
    assert height > P_CLAMP  # the failing row is beyond the axis
    svg = pvalue_plot(views, ["gof_sync", "gof_async"])
    assert f"clamped at {P_CLAMP:g}" in svg
    assert f">{height:.0f} </text>" in svg  # its true value is written on the clamped bar
    passing = pvalue_plot(views[:1], ["gof_sync", "gof_async"])
    assert "</text>" in passing and f">{height:.0f} </text>" not in passing


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1200,1400",
]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_html_renders_in_headless_chromium(tmp_path):
    image = pytest.importorskip("PIL.Image")
    page = tmp_path / "report.html"
    page.write_text(html_report(list(_pair(tmp_path))))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            "chromium",
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    with image.open(shot) as im:
        rgb = im.convert("RGB")
        colors = rgb.getcolors(maxcolors=1 << 20) or []
        non_white = sum(n for n, c in colors if c != (255, 255, 255))
        red = sum(n for n, (r, g, b) in colors if r > 180 and g < 80 and b < 80)
    assert non_white > 0.03 * rgb.width * rgb.height  # not blank: text, tables and plots
    assert len(colors) > 50 and red > 0  # anti-aliased text and the FAIL colour


def test_report_command_details_and_pubkey(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from specconform.cli.evidence import report_command

    toy.install_toy_kind(monkeypatch)
    private, public = generate_key_pem()
    (tmp_path / "k.key").write_bytes(private)
    (tmp_path / "k.pub").write_bytes(public)
    signed = _toy(tmp_path, "s", "toy-0123abcd-20250101T000000", key=tmp_path / "k.key")
    short = CliRunner().invoke(report_command, [str(signed)])
    full = CliRunner().invoke(report_command, [str(signed), "--details"])
    assert short.exit_code == 0 and full.exit_code == 0
    assert "### Formal checks" not in short.stdout and "### Formal checks" in full.stdout
    verified = CliRunner().invoke(
        report_command, [str(signed), "--pubkey", str(tmp_path / "k.pub")]
    )
    assert verified.exit_code == 0 and "| signature | verified, key id " in verified.stdout
    (tmp_path / "other.pub").write_bytes(generate_key_pem()[1])
    wrong = CliRunner().invoke(
        report_command, [str(signed), "--pubkey", str(tmp_path / "other.pub")]
    )
    assert wrong.exit_code == 3 and len(wrong.stderr.splitlines()) == 1
