"""The adapter watchdog (specconform.adapters.watchdog, issue 37 part 2), in process.

Deterministic, no timing flakiness: every hang below is infinite and every deadline
short, so the only outcome is the timeout; a call that returns at once is never late
(0.2-s deadlines against microsecond calls). No statistics: no alpha or power applies.
Negative controls: the same calls without a deadline, or quick ones under it, return
their answer untouched.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from specconform.adapters.checks import CheckedEngine
from specconform.adapters.watchdog import deadline, timed_call
from specconform.util.errors import EXIT_TIMEOUT, AdapterTimeout, UsageError
from tests.toolkit.plain_adapter import PlainAdapter

SHORT = 0.2  # s: every hang is infinite, so any deadline ends it


def _failed(exc):
    return UsageError(f"failed: {type(exc).__name__}")


def _timed(fn, seconds=SHORT):
    return timed_call(fn, (), seconds=seconds, message="late", failed=_failed)


def _sleep_forever():
    time.sleep(10**6)


def _spin_forever():
    while True:
        pass


def _catch_exception_forever():
    """An adapter whose retry loop catches Exception: the interrupt is no Exception."""
    while True:
        try:
            time.sleep(10**6)
        except Exception:  # noqa: BLE001, S110
            pass


def _swallow_once_then_return():
    try:
        time.sleep(10**6)
    except BaseException:  # noqa: BLE001, S110 (swallows the interrupt, answers late)
        pass
    return "late answer"


@pytest.mark.parametrize(
    "hang", [_sleep_forever, _spin_forever, _catch_exception_forever, _swallow_once_then_return]
)
def test_a_hung_call_on_the_main_thread_times_out(hang):
    # Whatever handler an earlier test in this worker process left installed is the one
    # that must be back afterwards.
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(AdapterTimeout, match="^late$") as info:
        _timed(hang)
    assert info.value.exit_code == EXIT_TIMEOUT == 124
    # Nothing is left armed: no timer, the previous SIGALRM handler back.
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


def _spin_swallow_once_then_return():
    try:
        while True:
            pass
    except BaseException:  # noqa: BLE001, S110
        pass
    return "late answer"


# Spinning only: an asynchronous exception cannot reach a thread blocked in C (sleep);
# the hard exit ends that, and would end pytest with it.
@pytest.mark.parametrize("hang", [_spin_forever, _spin_swallow_once_then_return])
def test_a_hung_call_off_the_main_thread_times_out(hang):
    """The Python API called from a worker thread: an asynchronous exception (a
    blocking sleep off the main thread is out of its reach; the hard exit covers it)."""
    got: list[BaseException] = []

    def worker():
        try:
            _timed(hang)
        except BaseException as exc:  # noqa: BLE001 (the test reads it)
            got.append(exc)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and len(got) == 1 and isinstance(got[0], AdapterTimeout), got


def test_negative_control_quick_calls_answer_and_errors_keep_their_kind():
    assert _timed(lambda: 42) == 42
    assert timed_call(lambda: 7, (), seconds=None, message="late", failed=_failed) == 7
    with pytest.raises(UsageError, match="^bad group$"):
        _timed(lambda: (_ for _ in ()).throw(UsageError("bad group")))
    with pytest.raises(UsageError, match="^failed: RuntimeError$"):
        _timed(lambda: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(UsageError, match="^failed: SystemExit$"):
        _timed(lambda: sys.exit(0))
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C still interrupts (exit 130)
        _timed(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_deadline_inside_a_deadline_is_the_outer_one():
    with deadline(SHORT, "outer") as outer:
        with deadline(SHORT / 10, "inner") as inner:
            assert inner is None and outer is not None
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


class _Hanging(PlainAdapter):
    def run_group(self, group, seeds, progress=None):
        time.sleep(10**6)


def test_checked_engine_times_every_call_with_the_specs_deadline():
    class Spec:
        call_timeout_s = SHORT
        max_tokens = 3
        num_speculative_tokens = 2

    engine = CheckedEngine(_Hanging(8, "hanging"), "test:hanging", Spec())
    with pytest.raises(AdapterTimeout, match=r"run_group\(\) did not return within 0.2 s"):
        engine.run_group(object(), [1, 2])
    assert engine.target_law([1]).shape == (8,)  # the engine still answers afterwards


def test_a_call_that_ignores_every_interruption_is_ended_by_a_hard_exit():
    """C code that never yields, or an adapter that swallows even the watchdog's
    interrupt for ever: one line, exit 124, after the grace (1 s for a short deadline)."""
    program = (
        "import time\n"
        "from specconform.adapters.watchdog import timed_call\n"
        "def stubborn():\n"
        "    while True:\n"
        "        try:\n"
        "            time.sleep(10**6)\n"
        "        except BaseException:\n"
        "            pass\n"
        "timed_call(stubborn, (), seconds=0.3, message='engine adapter x: late',"
        " failed=RuntimeError)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == EXIT_TIMEOUT, proc.stderr
    assert proc.stderr == "error: engine adapter x: late; it ignored the interruption for 1 s\n"


def test_a_callers_own_alarm_is_put_back():
    """A test's time limit (hostile_support.time_limit) around a timed call keeps ticking."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert _timed(lambda: 42) == 42
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left <= 30.0 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
