"""The specconform pytest plugin (entry point ``pytest11: specconform``).

Installing specconform registers it; ``pytest -p specconform`` loads it explicitly when
plugin autoloading is off. It adds:

- fixtures ``specconform_records`` (the CheckRecords made by the running test) and
  ``specconform_rng`` (a numpy Generator seeded from the test's node id: deterministic,
  different per test);
- ``--specconform-archive DIR``: writes ``DIR/specconform-checks.json`` with every check
  of the session (test id, statistic, df, p, n, seeds, detectable TV) and copies the
  evidence archives of ``assert_protocol_passes`` into DIR;
- failures raised inside specconform (the assertions, or anything they call) are shown
  from the test's own frame: specconform's frames are dropped from the traceback (as
  ``__tracebackhide__`` does) and the message is bounded (MAX_MESSAGE_LINES lines of
  MAX_LINE_CHARS characters: the numbers, then where it differs), so a failing
  assertion reads in a screen, not in the 100+ KB of source and argument reprs of every
  specconform frame;
- a terminal summary line: ``specconform: N checks in M tests: P PASS, F FAIL`` (and
  ``, I NO_EVIDENCE`` for deciding checks without evidence: an INCONCLUSIVE verdict) and,
  for the FAILs, how many were inside failing tests and how many inside passing ones
  (negative controls: a test that asserts a wrong sampler is rejected passes *because*
  its check FAILed, so a suite full of negative controls does not read as broken).

The assertions themselves live in :mod:`specconform.testing`; this module imports
nothing heavy, so loading the plugin costs nothing for suites that do not use it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from specconform.testing.records import COLLECTOR, CheckRecord

_STASH_RECORDS = pytest.StashKey[list]()
_STASH_FAILED_TESTS = pytest.StashKey[set]()
_ITEM_RECORDS = pytest.StashKey[list]()
# The attribute of a test report that carries its checks: pytest-xdist serialises a
# report's attributes from the worker to the controller, where the summary is written.
REPORT_ATTRIBUTE = "specconform_checks"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specconform", "specconform distribution assertions")
    group.addoption(
        "--specconform-archive",
        metavar="DIR",
        default=None,
        help="write the evidence of every specconform check of the session "
        "to DIR (specconform-checks.json, run archives)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STASH_RECORDS] = []
    config.stash[_STASH_FAILED_TESTS] = set()
    config.pluginmanager.register(_Tally(config), "specconform-tally")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Attach the test's checks to its call-phase report, as JSON rows (they cross the
    process boundary under pytest-xdist); a failure raised inside specconform is shown
    from the test's frame with a bounded message (module docstring)."""
    full = item.config.getoption("fulltrace", False)  # --full-trace: show every frame
    if call.excinfo is not None and not full and _raised_in_specconform(call.excinfo):
        _shorten(call.excinfo)
    report = yield
    if report.when == "call":
        setattr(report, REPORT_ATTRIBUTE, [r.to_json() for r in item.stash.get(_ITEM_RECORDS, [])])
    return report


_PACKAGE = Path(__file__).resolve().parent


def _in_specconform(path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError, TypeError):
        return False


def _raised_in_specconform(excinfo: pytest.ExceptionInfo) -> bool:
    """An AssertionError whose innermost frame is specconform's (its assertions)."""
    if not isinstance(excinfo.value, AssertionError) or not len(excinfo.traceback):
        return False
    return _in_specconform(excinfo.traceback[-1].path)


def _shorten(excinfo: pytest.ExceptionInfo) -> None:
    from specconform.testing.records import bounded

    kept = excinfo.traceback.filter(lambda entry: not _in_specconform(entry.path))
    if len(kept):
        excinfo.traceback = kept
    message = str(excinfo.value)
    excinfo.value.args = (bounded(message),)


class _Tally:
    """Reads every test report where the terminal summary is written (the controller
    under pytest-xdist, the one process otherwise): the checks, and which tests failed
    (any phase), to tell a negative control's FAIL inside a passing test from a real one."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rows = getattr(report, REPORT_ATTRIBUTE, None) or []
        self.config.stash[_STASH_RECORDS].extend(CheckRecord.from_json(r) for r in rows)
        if report.failed:
            self.config.stash[_STASH_FAILED_TESTS].add(report.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Attribute every record made while the test body runs to this test."""
    COLLECTOR.nodeid, start = item.nodeid, len(COLLECTOR.records)
    try:
        yield
    finally:
        item.stash[_ITEM_RECORDS] = COLLECTOR.records[start:]
        COLLECTOR.nodeid = None


@pytest.fixture
def specconform_records(request: pytest.FixtureRequest) -> list[CheckRecord]:
    """The checks the running test has made so far (a live view)."""
    return _LiveRecords(request.node.nodeid)


class _LiveRecords(list):
    def __init__(self, nodeid: str):
        super().__init__()
        self._nodeid = nodeid

    def _current(self) -> list[CheckRecord]:
        return [r for r in COLLECTOR.records if r.nodeid == self._nodeid]

    def __iter__(self):
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def __getitem__(self, index):
        return self._current()[index]


@pytest.fixture
def specconform_rng(request: pytest.FixtureRequest):
    """numpy Generator (PCG64) seeded from the test's node id: the same test draws the
    same numbers on every run and machine, two tests draw different ones."""
    import numpy as np

    digest = hashlib.sha256(request.node.nodeid.encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:8], "little")))


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller reports
        return
    records: list[CheckRecord] = config.stash.get(_STASH_RECORDS, [])
    target = config.getoption("--specconform-archive")
    if not records and target is None:
        return
    tests = {r.nodeid for r in records}
    failed_tests = config.stash.get(_STASH_FAILED_TESTS, set())
    fails = [r for r in records if not r.passed and not r.inconclusive]
    unknown = sum(1 for r in records if not r.passed and r.inconclusive)
    in_failing = sum(r.nodeid in failed_tests for r in fails)
    line = (
        f"specconform: {len(records)} checks in {len(tests)} tests: "
        f"{len(records) - len(fails) - unknown} PASS, {len(fails)} FAIL"
        + (f", {unknown} NO_EVIDENCE" if unknown else "")
    )
    if fails:
        line += f" ({in_failing} in failing tests, {len(fails) - in_failing} in passing tests"
        line += ": negative controls)" if len(fails) > in_failing else ")"
    if target is not None:
        line += f"; evidence in {_write_archive(Path(target), records)}"
    terminalreporter.write_line(line)


def _write_archive(target: Path, records: list[CheckRecord]) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    archives = []
    for record in records:
        if record.archive and record.archive not in archives and Path(record.archive).is_file():
            archives.append(record.archive)
            shutil.copy2(record.archive, target / Path(record.archive).name)
    payload = {
        "checks": [r.to_json() for r in records],
        "archives": [Path(a).name for a in archives],
    }
    out = target / "specconform-checks.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    return target
