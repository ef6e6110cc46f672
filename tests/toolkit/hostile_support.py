"""Shared by the hypothesis properties of hostile input (test_hostile_properties.py,
test_hostile_archive_properties.py, test_cli_properties.py): settings profiles, a time
limit, the one-line check.

Profiles. By default the bounded CI profile runs: ``derandomize=True`` (the same
examples on every run: CI is never flaky) and few enough examples (CI_EXAMPLES) that
each file takes well under 60 s on one idle core. The long profile, on demand
(``make test-hostile-long`` runs all three files)::

    SPECCONFORM_HYPOTHESIS=long .venv/bin/python -m pytest -q -s \\
        tests/toolkit/test_hostile_properties.py tests/toolkit/test_hostile_archive_properties.py

runs LONG_EXAMPLES random (not derandomized) examples per property; set
SPECCONFORM_HYPOTHESIS_EXAMPLES=N to choose N. With -s each property prints how many
examples ran and how they ended.
"""

from __future__ import annotations

import os
import random
import signal
from contextlib import contextmanager

from hypothesis import HealthCheck, Phase, given, settings

from specconform.util.errors import SpecconformError

LONG = os.environ.get("SPECCONFORM_HYPOTHESIS") == "long"
CI_EXAMPLES = {
    "generated": 150,
    "fragments": 150,
    "mutated": 200,
    "bytes": 150,
    "headers": 150,
    "argv": 300,  # test_cli_properties.py: in-process refusals, ~10 ms each
    "valid_protocol": 40,  # the same on a valid protocol: a few examples run (seconds)
}
LONG_EXAMPLES = int(os.environ.get("SPECCONFORM_HYPOTHESIS_EXAMPLES", "5000"))
# Negative controls: generate only (no shrinking: a failure is what they expect).
CONTROL = {"phases": [Phase.explicit, Phase.reuse, Phase.generate]}


def profile(name: str, **extra):
    """The settings of one property: bounded and derandomized, or long and random."""
    chosen = {
        "max_examples": LONG_EXAMPLES if LONG else CI_EXAMPLES.get(name, 20),
        "derandomize": not LONG,
        "database": None,
        "deadline": None,
        "suppress_health_check": list(HealthCheck),
        "print_blob": True,
    }
    return settings(**{**chosen, **extra})


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` swallows it."""


@contextmanager
def time_limit(seconds: float):
    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_one_line(error: SpecconformError) -> None:
    message = str(error)
    assert message and len(message.splitlines()) == 1, f"not one line: {message!r}"


def check_one_line(call, path, seconds: float, expected, outcomes, exit_code=None) -> str:
    """The property both files test: ``call(path)`` returns (``outcomes[0]``) or raises
    ``expected`` with a one-line message (``outcomes[1]``; with ``exit_code`` when
    given) within ``seconds``. A hang or any other exception is an AssertionError."""
    name = call.__name__
    try:
        with time_limit(seconds):
            call(path)
    except expected as exc:
        assert_one_line(exc)
        if exit_code is not None:
            assert exc.exit_code == exit_code
        return outcomes[1]
    except Hang as exc:
        raise AssertionError(f"{name} hung: {exc}") from None
    except Exception as exc:
        raise AssertionError(f"raw {type(exc).__name__} from {name}: {exc!r}") from exc
    return outcomes[0]


def summary(what: str, outcomes: list[str]) -> None:
    """Printed with -s: how many examples ran and how they ended."""
    counts = {k: outcomes.count(k) for k in sorted(set(outcomes))}
    print(f"\n{what}: {len(outcomes)} examples {counts}")


def cli_examples(strategy, count: int) -> list[bytes]:
    """`count` examples of `strategy`, the same on every run (seeded)."""
    found: list[bytes] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None)
    @given(strategy)
    def collect(value):
        found.append(value)

    collect()
    rng = random.Random(37)
    return rng.sample(found, min(count, len(found)))
