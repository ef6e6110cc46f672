"""Distribution assertions for an engine's own pytest suite (the pytest plugin's API).

    from specconform.testing import assert_law, assert_sampler_exact, assert_protocol_passes

- :func:`assert_law` — draws follow an exact law (Pearson χ², detectable TV checked);
- :func:`assert_sampler_exact` — a speculative accept function is exact (quadrature and
  Monte Carlo with specconform's kernel protocols);
- :func:`assert_protocol_passes` — a pre-registered protocol passes.

Each returns typed :class:`CheckRecord` s (statistic, df, p, n, seeds, detectable TV) and
raises AssertionError with those numbers on failure. Seeds are fixed, so a failure
reproduces. With the plugin installed (`pytest11` entry point ``specconform``),
``--specconform-archive DIR`` writes every record of the session to DIR.
"""

from specconform.testing.law import assert_law
from specconform.testing.protocol import assert_protocol_passes
from specconform.testing.records import CheckRecord
from specconform.testing.sampler import (
    MONTECARLO_CASES,
    QUADRATURE_CASES,
    assert_sampler_exact,
)

__all__ = [
    "MONTECARLO_CASES",
    "QUADRATURE_CASES",
    "CheckRecord",
    "assert_law",
    "assert_protocol_passes",
    "assert_sampler_exact",
]
