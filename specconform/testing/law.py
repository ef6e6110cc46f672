"""`assert_law`: samples from a sampler follow an exact law (Pearson χ² with the fixed
pooling rule), with the sample size checked against the smallest TV it must detect."""

from __future__ import annotations

import math

import numpy as np

from specconform.api.stats import detectable_tv as _detectable_tv
from specconform.api.stats import pearson_gof
from specconform.testing.records import COLLECTOR, CheckRecord, fail_message

POWER = 0.8


def assert_law(
    samples,
    p,
    *,
    alpha: float = 0.01,
    detectable_tv: float | None = None,
    power: float = POWER,
    seeds: str = "not stated",
    min_expected: float = 5.0,
    name: str = "law",
) -> CheckRecord:
    """Assert that `samples` are draws from the exact law `p`.

    Parameters
    ----------
    samples : array_like of int, shape (n,)
        Draws (token ids) in ``[0, len(p))``; a draw outside, or on a cell of probability
        0, fails at once (out of support).
    p : array_like, shape (C,)
        The exact law.
    alpha : float
        False-fail rate of the check for a correct sampler.
    detectable_tv : float, optional
        The TV the check must detect with probability ``power``. If ``n`` is too small
        for that, the assertion fails as underpowered (a PASS would prove nothing) and
        says how many samples are needed.
    seeds : str
        How the samples were seeded, for the failure message (deterministic tests state it).

    Returns
    -------
    CheckRecord
        statistic, df, p-value, n, detectable TV (also recorded for the plugin's summary).

    Raises
    ------
    AssertionError
        The law is rejected at ``alpha``, or the sample is underpowered.
    """
    law = np.asarray(p, dtype=np.float64)
    if law.ndim != 1 or law.size == 0:
        raise ValueError("p must be a non-empty one-dimensional law")
    draws = np.asarray(samples).ravel()
    if draws.size and not np.issubdtype(draws.dtype, np.integer):
        raise ValueError("samples must be integer draws (token ids)")
    outside = int(np.count_nonzero((draws < 0) | (draws >= law.size)))
    inside = draws[(draws >= 0) & (draws < law.size)]
    counts = np.bincount(inside, minlength=law.size)
    result = pearson_gof(counts, law, min_expected=min_expected)
    n = int(draws.size)
    dtv = _detectable_tv(n, max(int(result.df), 1), alpha, power) if n else math.inf
    out_of_support = result.out_of_support + outside
    passed = result.pvalue >= alpha and out_of_support == 0
    note = f"{out_of_support} draws out of support" if out_of_support else ""
    underpowered = detectable_tv is not None and dtv > detectable_tv
    if detectable_tv is not None and underpowered:
        needed = math.ceil(n * (dtv / detectable_tv) ** 2) if n else None
        note = (
            f"underpowered: detects TV >= {dtv:.4g}, asked for {detectable_tv:g}; "
            f"need about n >= {needed}"
            if needed
            else "no samples"
        )
    record = COLLECTOR.add(
        CheckRecord(
            check="assert_law",
            name=name,
            passed=passed and not underpowered,
            statistic=float(result.statistic) if not outside else math.inf,
            df=float(result.df),
            pvalue=float(result.pvalue) if not outside else 0.0,
            n=n,
            alpha=alpha,
            seeds=seeds,
            detectable_tv=dtv,
            note=note,
        )
    )
    if not record.passed:
        __tracebackhide__ = True  # the test's frame is the one to show, not specconform's
        header = "sample too small" if underpowered else f"law rejected at alpha={alpha:g}"
        raise AssertionError(fail_message("assert_law", [record], header))
    return record
