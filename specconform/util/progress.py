"""Progress for long loops: a rich progress bar on a terminal, plain log lines in CI
(``CI=true``) or when output is not a terminal, so logs stay readable.

Notices (`notice(line)`) are what a run tells its user while it works (an interrupted
run's checkpoint, a warning): one line on stderr each, whatever the verbosity. The
runner reports only through these and its progress bars; results and tables are the
caller's to print.

Wall-clock timings (`timing(line)`) are for people tuning a run: printed to stderr as
``timing: ...`` only when verbose output was asked for (``--verbose``, or
`set_verbose(True)`), and never written to the archive's log.txt (two runs with the
same inputs must give byte-identical evidence).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

_VERBOSE = False


def set_verbose(on: bool) -> None:
    global _VERBOSE
    _VERBOSE = bool(on)


def verbose() -> bool:
    return _VERBOSE


def notice(line: str) -> None:
    """One line for the user on stderr, now (not in the archive: log.txt is the run's)."""
    print(line, file=sys.stderr, flush=True)


def timing(line: str) -> None:
    """A `timing: ...` line on stderr, only in verbose mode."""
    if _VERBOSE:
        print(f"timing: {line}", file=sys.stderr, flush=True)


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere): the cold-start
    share of a run (interpreter, imports) that no timer inside the run can see."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # Field 22 (starttime, clock ticks after boot); the name in field 2 may hold
            # spaces, so count from its closing parenthesis.
            started = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def timing_since_start(what: str) -> None:
    """`timing: WHAT at N s after process start` (verbose mode, Linux)."""
    age = process_age() if _VERBOSE else None
    if age is not None:
        timing(f"{what} at {age:.1f}s after process start")


def interactive() -> bool:
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() not in ("1", "true", "yes")


class _PlainProgress:
    """Logs at most every 10% (and at the end) to stderr."""

    def __init__(self, description: str, total: int, log=None):
        self.description, self.total, self.done = description, max(int(total), 1), 0
        self._next = 0.1
        self._t0 = time.monotonic()
        self._log = log

    def advance(self, n: int = 1) -> None:
        self.done += n
        frac = self.done / self.total
        if frac >= self._next or self.done >= self.total:
            line = (
                f"{self.description}: {self.done}/{self.total} "
                f"({100 * frac:.0f}%, {time.monotonic() - self._t0:.1f}s)"
            )
            print(line, file=sys.stderr, flush=True)
            if self._log:
                self._log(line)
            while self._next <= frac:
                self._next += 0.1


class _RichProgress:
    def __init__(self, bar, task):
        self._bar, self._task = bar, task

    def advance(self, n: int = 1) -> None:
        self._bar.advance(self._task, n)


@contextmanager
def progress(description: str, total: int, log=None):
    """Yields an object with ``advance(n)``."""
    if not interactive():
        yield _PlainProgress(description, total, log)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=False,
    ) as bar:
        yield _RichProgress(bar, bar.add_task(description, total=total))


class _SilentProgress:
    """Shows nothing: the library default where no terminal is ours to draw on."""

    def __enter__(self) -> _SilentProgress:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def advance(self, n: int = 1) -> None:
        return None


def silent(description: str, total: int, log=None) -> _SilentProgress:
    """A `progress` stand-in with the same signature that shows nothing."""
    return _SilentProgress()
