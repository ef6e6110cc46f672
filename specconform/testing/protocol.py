"""`assert_protocol_passes`: run a pre-registered protocol inside a test and fail with
the deciding rows when it does not pass. The archive is kept and recorded."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from specconform.api.stats import detectable_tv
from specconform.results import NO_EVIDENCE
from specconform.testing.records import COLLECTOR, CheckRecord, fail_message

POWER = 0.8


def assert_protocol_passes(
    path: str | os.PathLike[str],
    *,
    seeds: int | None = None,
    offset: int | None = None,
    mutant: str | None = None,
    device: str | None = None,
    out: str | os.PathLike[str] | None = None,
):
    """Run the protocol at `path` (unsigned) and assert its verdict is PASS.

    Parameters
    ----------
    path : path-like
        Protocol file.
    seeds, offset, mutant, device
        As for :func:`specconform.run` (overrides only where the protocol allows them).
    out : path-like, optional
        Output folder; default a fresh temporary folder (each call is a new run, so the
        seed ledger never refuses a rerun of the test).

    Returns
    -------
    specconform.Run
    """
    from specconform.api import run

    out_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="specconform-"))
    result = run(
        path, seeds=seeds, offset=offset, mutant=mutant, device=device, out=out_dir, sign=False
    )
    from specconform.report.model import load_views

    view = load_views([result.archive])[0]
    ranges = ", ".join(f"{g} [{a}, {b})" for g, (a, b) in sorted(view.seed_ranges.items()))
    records = []
    for row in result.tests:
        if row.passed is None:
            continue
        dtv = (
            detectable_tv(row.n, int(row.df), row.alpha, POWER)
            if row.df and row.pvalue is not None and 0 < row.alpha < 1
            else None
        )
        records.append(
            COLLECTOR.add(
                CheckRecord(
                    check="assert_protocol_passes",
                    name=f"{result.run_id}:{row.test}",
                    passed=bool(row.passed),
                    statistic=row.statistic,
                    df=row.df,
                    pvalue=row.pvalue,
                    n=row.n,
                    alpha=row.alpha,
                    seeds=ranges or "not recorded",
                    detectable_tv=dtv,
                    archive=str(result.archive),
                    inconclusive=row.status == NO_EVIDENCE,
                )
            )
        )
    if not result.passed:
        __tracebackhide__ = True  # the test's frame is the one to show, not specconform's
        named = set(result.failed) | set(result.inconclusive)
        why = "; ".join(
            f"{what}: {', '.join(names)}"
            for what, names in (("failed", result.failed), ("no evidence", result.inconclusive))
            if names
        )
        raise AssertionError(
            fail_message(
                "assert_protocol_passes",
                [r for r in records if r.name.split(":", 1)[1] in named],
                f"{Path(path)} verdict {result.verdict} ({why}); archive {result.archive}",
                _where(result.archive),
            )
        )
    return result


def _where(archive) -> tuple[str, ...]:
    """Where the failing rows differ (specconform.diagnosis), for the message."""
    from dataclasses import replace

    from specconform.diagnosis import diagnose_archive
    from specconform.evidence.reader import read_archive

    diagnoses = diagnose_archive(read_archive(Path(archive)))
    return tuple(line for d in diagnoses for line in replace(d, archive=str(archive)).lines())
