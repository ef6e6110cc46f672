"""A deadline on every adapter call (issue 37): a hung engine ends the run, never hangs it.

`CheckedEngine` (`adapters.checks`) and `load_engine` run each call to the adapter inside
``deadline(seconds, message)``. On expiry:

1. the call is interrupted where it stands: on the main thread by SIGALRM (setitimer),
   whose handler raises `Expired` between two bytecodes -- a Python loop, ``time.sleep``
   and any blocking call Python retries after a signal (PEP 475) are all left at once;
   on another thread (the Python API called from a worker) by an asynchronous exception
   set on that thread (`PyThreadState_SetAsyncExc`), which Python-level code sees at its
   next bytecode. `Expired` is a BaseException, so an adapter's ``except Exception:`` does
   not swallow it; it is raised again every `REPEAT_S` until the call is left, so neither
   does a loop that catches it once.
2. the caller (`checks._call`) turns whatever leaves the call into `AdapterTimeout`
   (`specconform.util.errors`, exit 124): the run ends like an interruption -- a distribution
   run keeps OUT/<run-id>.inprogress and its ledger reservation for ``--resume``; a
   sequence run gives its seeds back (`runner.reserve`); nothing half-written is left
   (batch files are renamed into place whole, the archive is staged).
3. a call that still has not returned `grace_s(seconds)` later (C code that never gives
   the interpreter back, signals blocked, an adapter that swallows BaseException for
   ever) cannot be unwound in-process: the watchdog thread prints the one error line
   and hard-exits with 124. What is on disk is then what kill -9 would leave: the
   checkpoint and its reservation, recorded for ``--resume``.

A deadline inside a deadline (an adapter that calls back into a checked call) is the
outer one's: only the outermost call is timed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from specconform.util.errors import EXIT_TIMEOUT, AdapterTimeout, UsageError

# Between re-raises while an expired call has not been left yet (an adapter that caught
# `Expired` once). Short against any deadline a user sets; long against the handler's cost.
REPEAT_S = 1.0
# The most a hard exit waits after the deadline for the call to unwind: long enough for
# an adapter's own cleanup (freeing a CUDA graph, closing a socket), short against a hang.
GRACE_MAX_S = 30.0


class Expired(BaseException):
    """Raised inside an adapter call whose deadline passed. A BaseException, so that the
    adapter's ``except Exception`` cannot hide it; `checks._call` turns it into
    `AdapterTimeout`."""


def grace_s(seconds: float) -> float:
    """How long after the deadline the hard exit waits: the deadline itself, within
    [1, GRACE_MAX_S] s (a 1-s test deadline hard-exits at 2 s, a 1-hour one 30 s late)."""
    return min(GRACE_MAX_S, max(1.0, seconds))


@dataclass
class Watch:
    """One timed call. ``fired`` says the deadline passed during it, whatever the call did
    with the interruption (the caller reports a timeout, not the adapter's reaction)."""

    seconds: float
    message: str  # the one-line error, printed by the hard exit
    armed: bool = True  # False once the call is left: a late tick raises nothing
    fired: bool = False
    thread_id: int = field(default_factory=threading.get_ident)


_current: list[Watch] = []  # the outermost timed call, if any (one per process)


def _interrupt(watch: Watch) -> None:
    """Raise `Expired` in the timed thread (main thread: from the SIGALRM handler)."""
    if not watch.armed:
        return
    watch.fired = True
    if watch.thread_id == threading.main_thread().ident:
        raise Expired()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(watch.thread_id), ctypes.py_object(Expired)
    )


def _hard_exit(watch: Watch) -> None:
    if not watch.armed:
        return
    line = f"error: {watch.message}; it ignored the interruption for {grace_s(watch.seconds):g} s\n"
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.write(2, line.encode("utf-8", "backslashreplace"))
    os._exit(EXIT_TIMEOUT)


def timeout_message(who: str, call: str, seconds: float | None) -> str:
    """The one error line of a call past its deadline."""
    return (
        f"{who}: {call} did not return within {seconds or 0:g} s (engine.call_timeout_s, "
        "--adapter-timeout); a distribution run keeps OUT/<run-id>.inprogress for --resume"
    )


def timed_call(
    fn: Callable[..., Any],
    args: tuple,
    *,
    kwargs: dict[str, Any] | None = None,
    seconds: float | None,
    message: str,
    failed: Callable[[BaseException], Exception],
) -> Any:
    """``fn(*args)`` under a deadline of `seconds`. A call during which the deadline
    passed raises `AdapterTimeout(message)`, whatever it then did (returned late, raised,
    swallowed the interrupt); otherwise a `UsageError` passes through and any other
    exception, `SystemExit` included (an adapter's exit is its failure), becomes
    ``failed(exc)``. KeyboardInterrupt passes: Ctrl-C still interrupts."""
    watch = None
    try:
        with deadline(seconds, message) as watch:
            answer = fn(*args, **(kwargs or {}))
    except (Exception, SystemExit, Expired) as exc:
        if watch is not None and watch.fired:
            raise AdapterTimeout(message) from None
        if isinstance(exc, UsageError):
            raise
        raise failed(exc) from None
    if watch is not None and watch.fired:
        raise AdapterTimeout(message)
    return answer


@contextmanager
def deadline(seconds: float | None, message: str) -> Iterator[Watch | None]:
    """Time the enclosed call; yields its `Watch` (None when untimed: no deadline, or
    inside another timed call). `message` is the one line of the hard exit."""
    if seconds is None or _current:
        yield None
        return
    watch = Watch(float(seconds), message)
    on_main = threading.current_thread() is threading.main_thread()
    ticker: _Ticker | None = None
    previous = None
    outer = (0.0, 0.0)
    started = time.monotonic()
    if on_main:
        previous = signal.signal(signal.SIGALRM, lambda signum, frame: _interrupt(watch))
        # A caller's own alarm (a test's time limit) is put back, less the time spent.
        outer = signal.setitimer(signal.ITIMER_REAL, watch.seconds, REPEAT_S)
    else:
        ticker = _Ticker(watch)
        ticker.start()
    backstop = threading.Timer(watch.seconds + grace_s(watch.seconds), _hard_exit, (watch,))
    backstop.daemon = True  # never joined at exit (cli._leave joins non-daemon threads)
    backstop.start()
    _current.append(watch)
    try:
        yield watch
    finally:
        watch.armed = False  # first: a tick between here and the cancel raises nothing
        backstop.cancel()
        if on_main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer[0] > 0:
                left = max(outer[0] - (time.monotonic() - started), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, outer[1])
        if ticker is not None:
            ticker.stop()
            ticker.join()
            if watch.fired:  # drop an exception set but not yet seen (None: NULL clears it)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(watch.thread_id), None)
        _current.pop()


class _Ticker(threading.Thread):
    """Off the main thread: interrupt the timed thread at the deadline, then every
    REPEAT_S until the call is left."""

    def __init__(self, watch: Watch):
        super().__init__(daemon=True, name="specconform-watchdog")
        self._watch = watch
        self._done = threading.Event()

    def run(self) -> None:
        wait = self._watch.seconds
        while not self._done.wait(wait):
            _interrupt(self._watch)
            wait = REPEAT_S

    def stop(self) -> None:
        self._done.set()
