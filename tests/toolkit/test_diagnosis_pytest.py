"""The pytest side of issue 36: a failing specconform assertion reads in a screen.

- the message is at most 20 lines of at most 240 characters (numbers first, then where
  it differs);
- no specconform frame in the traceback (``__tracebackhide__`` and the plugin's filter):
  the test's own frame is shown; ``--full-trace`` (pytest's switch that shows hidden
  frames) is the negative control: there the frames and their source appear;
- assert_protocol_passes's message carries the diagnosis of the archive.

The failing law: TV ~0.27 between a Dirichlet(1) draw and the uniform law over 2,000
cells at n = 100,000 (seed fixed): chi2 rejects at alpha 0.01 with power ~1.
"""

from __future__ import annotations

import pytest

from specconform.testing.protocol import _where
from specconform.testing.records import MAX_LINE_CHARS, MAX_MESSAGE_LINES, bounded
from tests.toolkit.fixtures.failing_run import out_of_support_archive

pytest_plugins = ["pytester"]

BIG_FAILURE = """
import numpy as np
from specconform.testing import assert_law

def test_wrong_law_on_a_big_list():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(2000))
    samples = [int(x) for x in rng.choice(2000, size=100_000, p=q)]  # a 100,000-item list
    assert_law(samples, [1 / 2000] * 2000, seeds="default_rng(0)")
"""


def _failure_section(text: str) -> str:
    start = text.index("_ test_wrong_law_on_a_big_list _")
    return text[start : text.index("short test summary info", start)]


def test_failure_is_short_and_shows_no_specconform_frame(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_big=BIG_FAILURE)
    result = pytester.runpytest_subprocess("-p", "specconform")
    result.assert_outcomes(failed=1)
    section = _failure_section(result.stdout.str())
    assert "specconform/" not in section and "def assert_law" not in section
    message = [line for line in section.splitlines() if line.startswith("E ")]
    assert 1 <= len(message) <= MAX_MESSAGE_LINES
    assert "law rejected at alpha=0.01" in message[0]
    assert len(section) < 4000  # the list's repr is nowhere
    # Negative control: pytest's --full-trace shows hidden frames; the check sees them.
    full = pytester.runpytest_subprocess("-p", "specconform", "--full-trace")
    full_section = _failure_section(full.stdout.str())
    assert "specconform/testing/law.py" in full_section and "def assert_law" in full_section


def test_bounded_cuts_lines_and_says_so():
    text = "\n".join(f"line {i} " + "x" * (i * 40) for i in range(50))
    out = bounded(text).splitlines()
    assert len(out) == MAX_MESSAGE_LINES and out[-1].strip().startswith("... 31 more lines")
    assert all(len(line) <= MAX_LINE_CHARS for line in out)
    assert bounded("a\nb") == "a\nb"  # short text unchanged


def test_protocol_failure_message_says_where(tmp_path):
    archive, planted = out_of_support_archive(tmp_path, "ci_gate-00000000-20250101T000000")
    lines = _where(archive)
    assert lines[0] == "out_of_support: FAIL (out of support)"
    joined = "\n".join(lines)
    assert f"seed {planted.seed} position 2 token {planted.token}" in joined
    assert f"specconform replay {archive} --test out_of_support" in joined


@pytest.mark.parametrize("n", [0, 1])
def test_bounded_keeps_messages_within_the_cap_unchanged(n):
    text = "\n".join(f"row {i}" for i in range(MAX_MESSAGE_LINES - n))
    assert bounded(text) == text
