"""Result records shared by every protocol kind, the evidence writer and `verify`.

A test returns a frozen :class:`TestRow` in the scipy style: ``statistic``, ``df``,
``pvalue`` (the p-value the decision used, named by ``pvalue_method``), ``n``, a
``status`` and, for deciding tests, the family-adjusted p-value (``adjusted_pvalue``,
e.g. Holm's). ``detail`` is the per-stratum record of the test: a typed frozen record
of :mod:`specconform.details` (numbers finite or None) whose ``to_json()`` is written to
the archive; reading a row back picks the record from the archive's kind.

Status, one of :data:`STATUSES`:

- ``PASS`` / ``FAIL``: the test had evidence and decided;
- ``NO_EVIDENCE``: nothing was testable (df 0, no stratum reached the threshold, every
  cell pooled into one); never a pass, and in a deciding role it makes the verdict
  INCONCLUSIVE (results schema 3; schema 2 read it as a FAIL, "no evidence");
- ``INFO``: reported, never decides (exploratory rows, coverage).

``passed`` stays for readers of the first archive schema: True for PASS, False for
FAIL and NO_EVIDENCE, None for INFO.

Imports no torch: a reviewer recomputes verdicts from raw data with numpy/scipy/pandas.
"""

from .raw import RawData
from .rows import (
    FAIL,
    INFO,
    NO_EVIDENCE,
    PASS,
    ROLES,
    STATUSES,
    Decision,
    TestRow,
    json_number,
)
from .verdict import INCONCLUSIVE, RESULTS_SCHEMA, VERDICTS, Evaluation, Verdict, decide

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "INFO",
    "NO_EVIDENCE",
    "PASS",
    "RESULTS_SCHEMA",
    "ROLES",
    "STATUSES",
    "VERDICTS",
    "Decision",
    "Evaluation",
    "RawData",
    "TestRow",
    "Verdict",
    "decide",
    "json_number",
]
