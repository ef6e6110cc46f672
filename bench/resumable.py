"""A bench's replications, resumable: each result appended to a CSV as it ends, those
already in it skipped, in a spawn pool of ``workers`` processes (or in this process)."""

from __future__ import annotations

import csv
import multiprocessing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


def run_resumable(
    todo: Iterable[int],
    *,
    one: Callable[[int], Any],
    init: Callable[..., None],
    init_args: tuple,
    workers: int,
    out: Path | None,
    columns: Sequence[str],
    row_of: Callable[[Any], list],
    report: Callable[[int, int, Any], None],
) -> list[Any]:
    """Run ``one(key)`` for every key of ``todo`` after ``init(*init_args)`` in each
    worker; append ``row_of(result)`` under ``columns`` to ``out`` as each ends (the
    header written if the file is new), and call ``report(i, len(todo), result)``.
    Returns the results in the order they ended."""
    todo = list(todo)
    if out is not None and not out.exists():
        with open(out, "w", newline="") as fh:
            csv.writer(fh).writerow(columns)
    if workers > 1:
        pool = multiprocessing.get_context("spawn").Pool(workers, init, init_args)
        results = pool.imap_unordered(one, todo)
    else:
        init(*init_args)
        pool, results = None, map(one, todo)
    ended = []
    try:
        for i, rep in enumerate(results):
            ended.append(rep)
            if out is not None:
                with open(out, "a", newline="") as fh:
                    csv.writer(fh).writerow(row_of(rep))
            report(i, len(todo), rep)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return ended
