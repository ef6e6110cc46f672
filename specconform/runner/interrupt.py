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

Unset (every real run), :func:`batch_written` costs one dictionary lookup per batch.
"""

from __future__ import annotations

import os
import signal

from specconform.errors import UsageError

ENV = "SPECCONFORM_TEST_INTERRUPT"
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
