"""A deterministic interruption point for tests of kill and resume (issue 39).

Tests that interrupt a run must not race it: a test that polls the checkpoint and then
sends a signal loses the race on a loaded machine (the run finishes between two polls).
Instead the run signals itself at a point the test chooses, through one environment
variable that only tests set:

    SPECCONFORM_TEST_INTERRUPT=N:SIGNAL[:RANK]

After this process has written its N-th batch file (whole, renamed into place), it sends
itself SIGNAL (a name: SIGKILL, SIGINT, SIGTERM). With RANK, only the torchrun rank of
that number does (``RANK`` in its environment); others ignore the variable. A signal sent
to the calling process is delivered before ``os.kill`` returns, so the checkpoint then
holds exactly the batches written so far: no interleaving is left to chance.

A second variable holds a run right after it has reserved its seeds in the ledger:

    SPECCONFORM_TEST_HOLD_AFTER_RESERVE=PATH

The run waits (outside the ledger's lock) until PATH exists, so a test of two runs
started together over one ledger knows the winner is still live when the loser checks:
the test releases the winner only after the loser has exited.

Unset (every real run), each hook costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from specconform.util.errors import UsageError

ENV = "SPECCONFORM_TEST_INTERRUPT"
HOLD_ENV = "SPECCONFORM_TEST_HOLD_AFTER_RESERVE"
HOLD_LIMIT_S = 600.0  # a hang guard: a test that never releases fails, not hangs
_written = 0  # batch files this process wrote (a resumed run is a new process: from 0)


def _parse(value: str) -> tuple[int, signal.Signals, int | None]:
    parts = value.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        after, sig = int(parts[0]), signal.Signals[parts[1]]
        rank = int(parts[2]) if len(parts) == 3 else None
        if after < 1:
            raise ValueError
    except (ValueError, KeyError):
        raise UsageError(
            f"{ENV}={value!r}: expected N:SIGNAL[:RANK], e.g. 4:SIGKILL (a test-only hook)"
        ) from None
    return after, sig, rank


def check_environment() -> None:
    """Refuse a malformed value before any work (a typo must not silently never fire)."""
    value = os.environ.get(ENV)
    if value:
        _parse(value)


def batch_written() -> None:
    """Call after each batch file is in place; signals this process when the test's
    point is reached."""
    global _written
    value = os.environ.get(ENV)
    if not value:
        return
    after, sig, rank = _parse(value)
    if rank is not None and int(os.environ.get("RANK", "0")) != rank:
        return
    _written += 1
    if _written == after:
        os.kill(os.getpid(), sig)


def seeds_reserved() -> None:
    """Call after this run's ledger entries are written (the lock released); holds the
    run until the test's release file exists."""
    value = os.environ.get(HOLD_ENV)
    if not value:
        return
    release, deadline = Path(value), time.monotonic() + HOLD_LIMIT_S
    while not release.exists():
        if time.monotonic() > deadline:
            raise UsageError(f"{HOLD_ENV}: {release} did not appear in {HOLD_LIMIT_S:g} s")
        time.sleep(0.02)
