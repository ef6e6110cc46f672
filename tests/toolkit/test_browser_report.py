"""The HTML reports in a real headless browser (issue 36): Debian's chromium driven by
Selenium through chromium-driver (no browser download). The pages render without a
console error and the failing test's card is visible, with its diagnosis, for the
per-archive HTML report of two archives side by side and for `report --pr --format html`.

Negative controls: a page with a broken resource logs a console error the check sees; a
card hidden by CSS is reported not visible.

Skips, saying what to install, where chromium, chromium-driver or selenium is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specconform.report import html_report
from specconform.report.pr_html import pr_html
from tests.toolkit.fixtures import distribution_run as real
from tests.toolkit.fixtures.failing_run import out_of_support_archive

INSTALL = "apt-get install chromium chromium-driver && pip install selenium (or: make test-deps)"
pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("chromedriver") is None,
    reason=f"no chromium/chromedriver: {INSTALL}",
)
webdriver = pytest.importorskip("selenium.webdriver", reason=f"no selenium: {INSTALL}")


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    base = tmp_path_factory.mktemp("browser")
    failing, planted = out_of_support_archive(base / "f", "ci_gate-00000000-20250101T000000")
    clean = real.build_archive(base / "c", "ci_gate-00000000-20250303T000000")
    return clean, failing, planted


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1600"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def _open(browser, path: Path) -> list[dict]:
    """Load the page; its console entries of level SEVERE (errors)."""
    browser.get_log("browser")  # drop entries of earlier pages
    browser.get(path.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    return [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]


def _failing_card(browser):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, "failing-0")


def _shown_card(browser, page: Path, html: str):
    """Write ``html`` to ``page`` and open it: no console error, and its first failing
    card is displayed (the card, for the caller's own checks)."""
    page.write_text(html)
    assert _open(browser, page) == []
    card = _failing_card(browser)
    assert card.is_displayed()
    return card


def test_html_report_of_two_archives_shows_the_failing_card(browser, archives, tmp_path):
    clean, failing, planted = archives
    card = _shown_card(browser, tmp_path / "report.html", html_report([clean, failing]))
    assert "out_of_support" in card.text and f"seed {planted.seed} position 2" in card.text
    # Side by side: both archives are columns of the summary table, labelled by run.
    header = browser.find_element("tag name", "tr").text
    assert "A: primary" in header and "B: replication" in header


def test_pr_html_shows_the_failing_card_first(browser, archives, tmp_path):
    clean, failing, planted = archives
    card = _shown_card(browser, tmp_path / "pr.html", pr_html([clean, failing]))
    assert f"token {planted.token}" in card.text
    # The card comes before every table of the page.
    first_table = browser.find_element("tag name", "table")
    assert card.location["y"] < first_table.location["y"]


def test_checks_can_fail_on_a_broken_page(browser, tmp_path):
    """Negative controls: a missing image is a console error; a hidden card is not
    visible."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="missing-image.png">'
        '<div id="failing-0" style="display:none">out_of_support</div></body></html>'
    )
    assert _open(browser, page) != []
    assert not _failing_card(browser).is_displayed()
