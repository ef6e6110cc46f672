"""The adapter watchdog on a sequence run (issue 37 part 2): a sequence run has no
checkpoint, so a hung engine's run ends with exit 124 and gives its ledger reservation
back (runner.reserve), leaving no archive and no staging folder.

Deterministic: the hang is infinite and the deadline (10 s) far above the tiny CPU
engine's real calls (well under a second each), so the only outcome is the timeout. No
statistics. Negative control: the same protocol with the healthy bundled engine
completes within the same deadline (tests/toolkit/test_sequence_ledger.py runs it; here
its first run checks the deadline does not fire on a real engine)."""

from __future__ import annotations

import time

from tests.toolkit.test_sequence_ledger import _ledger, _protocol, _run

DEADLINE = "10"


def test_a_hung_sequence_engine_ends_124_and_gives_its_seeds_back(tmp_path):
    protocol = _protocol(tmp_path, adapter="tests.toolkit.test_watchdog_sequence:hanging")
    out = tmp_path / "out"
    hung = _run(protocol, out, "--adapter-timeout", DEADLINE)
    assert hung.returncode == 124, hung.stderr[-2000:]
    errors = [line for line in hung.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "run_requests() did not return within 10 s" in errors[0]
    assert "Traceback" not in hung.stderr
    assert _ledger(out) == []  # reserved during the run, released when it timed out
    assert not list(out.glob("*.zip")) and not list(out.glob(".partial-*"))


def test_negative_control_a_healthy_engine_finishes_within_the_deadline(tmp_path):
    done = _run(_protocol(tmp_path), tmp_path / "out", "--adapter-timeout", DEADLINE)
    assert done.returncode in (0, 1, 7), done.stderr[-2000:]  # a verdict, not 124


def hanging(spec, *, mutant=None, log=print):
    """The bundled engine whose generation never returns."""
    from specconform.adapters.bundled import BundledEngine

    engine = BundledEngine(spec, mutant=mutant, log=log)

    def run_requests(*args, **kwargs):
        time.sleep(10**6)

    engine.run_requests = run_requests  # type: ignore[method-assign]
    return engine
