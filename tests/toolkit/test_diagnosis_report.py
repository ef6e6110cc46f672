"""The reports say where it differs (issue 36): failing archives first, a card per
failing test first with its diagnosis, the failed rule in the p-value chart, residual
plots for χ² failures, labels from the archive.

Archives (fixed seeds, deterministic; fixtures/distribution_run.py): clean; one planted
out-of-support token (fixtures/failing_run.py); a target_temperature mutant run (Holm at
alpha 0.01 rejects t2_async with power ~1 at 2,000 seeds, test_report.py). The clean
archive is the negative control: no Failing tests section, no card.
"""

from __future__ import annotations

import pytest

from specconform.report import html_report
from specconform.report.pr import pr_markdown
from specconform.report.pr_html import markdown_html, pr_html
from tests.toolkit.fixtures.failing_run import known_archives

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return known_archives(tmp_path_factory.mktemp("reports"))


def test_pr_page_puts_failing_archives_and_their_cards_first(archives):
    page = pr_markdown([archives.clean, archives.failing])
    cards = page.index("### Failing tests")
    assert cards < page.index("### Functional checks") < page.index("### Evidence")
    planted = archives.planted
    assert f"seed {planted.seed} position 2 token {planted.token}" in page[cards:]
    # Failing archive first in the evidence table, though given second.
    evidence = page[page.index("### Evidence") :]
    assert evidence.index(archives.failing.name) < evidence.index(archives.clean.name)
    clean_only = pr_markdown([archives.clean])
    assert "### Failing tests" not in clean_only  # negative control


def test_a_mutant_run_is_labelled_as_one(archives):
    page = pr_markdown([archives.clean, archives.temperature])
    assert "(mutant target_temperature)" in page and "replication 2" not in page
    html = html_report([archives.clean, archives.temperature])
    assert "B: mutant target_temperature" in html


def test_html_cards_come_first_with_diagnosis_and_residuals(archives):
    html = html_report([archives.clean, archives.temperature])
    cards = html.index("<h2>Failing tests</h2>")
    assert cards < html.index("<h2>Tests (failing first)</h2>")
    card = html[html.index('id="failing-0"') :]
    card = card[: card.index("</div>")]
    assert "t2_async" in card and "top cells by contribution" in card
    assert "(O - E) / sqrt(E)" in card  # the residual plot of the worst stratum
    # Observed vs expected scatters are on a log scale (tail cells visible).
    assert "expected count (log)" in html


def test_failed_rule_has_a_place_in_the_pvalue_chart(archives):
    html = html_report([archives.failing])
    end = html.index("p-value of every test")
    chart = html[html.rindex("<svg", 0, end) : end]
    assert "out_of_support" in chart and "rule" in chart
    # The deciding failure is the first test in the chart, before the passing ones and
    # those that do not decide.
    assert chart.index("out_of_support") < chart.index("t1_nospec") < chart.index("t2_sync")


def test_pr_html_has_the_cards_and_the_tables(archives):
    html = pr_html([archives.clean, archives.failing])
    assert html.startswith("<!DOCTYPE html>")
    assert html.index('id="failing-0"') < html.index("<h3>Functional checks</h3>")
    assert html.count("<table>") >= 3 and "<td" in html
    assert html == pr_html([archives.clean, archives.failing])  # same bytes


def test_markdown_html_subset():
    lines = [
        "## A `b`",
        "",
        "| x | y \\| z |",
        "| --- | --- |",
        "| **PASS** | 1 |",
        "```",
        "<k>",
        "```",
    ]
    out = "\n".join(markdown_html(lines))
    assert "<h2>A <code>b</code></h2>" in out
    assert "<th>y | z</th>" in out and '<td class="PASS"><b>PASS</b></td>' in out
    assert "<pre>&lt;k&gt;</pre>" in out


def test_step_summary_carries_the_failing_cards(archives):
    from specconform.report import step_summary_markdown

    text = step_summary_markdown(archives.failing)
    planted = archives.planted
    assert "### Failing tests" in text and f"token {planted.token}" in text
    assert "### Failing tests" not in step_summary_markdown(archives.clean)
