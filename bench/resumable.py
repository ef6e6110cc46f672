"""A bench's replications, resumable: each result appended to a CSV as it ends, those
already in it read back and skipped, in a spawn pool of ``workers`` processes (or in this
process)."""

from __future__ import annotations

import csv
import multiprocessing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ResultCsv(Generic[T]):
    """One bench's result file: its ``columns``, a result's row (``row_of``), a row read
    back (``parse``, from csv.DictReader's dict) and the key it was run for (``key_of``)."""

    columns: Sequence[str]
    row_of: Callable[[T], list]
    parse: Callable[[dict[str, str]], T]
    key_of: Callable[[T], int]

    def read(self, out: Path | None) -> dict[int, T]:
        """The results already in ``out`` by key ({} without the file)."""
        if out is None or not out.exists():
            return {}
        with open(out, newline="") as fh:
            return {self.key_of(r): r for r in map(self.parse, csv.DictReader(fh))}


def join_list(items: Iterable[str]) -> str:
    """A list of names in one CSV cell (";"-separated), as :func:`split_list` reads it."""
    return ";".join(items)


def split_list(cell: str) -> tuple[str, ...]:
    return tuple(x for x in cell.split(";") if x)


def run_resumable(
    keys: Sequence[int],
    *,
    one: Callable[[int], T],
    init: Callable[..., None],
    init_args: tuple,
    workers: int,
    out: Path | None,
    table: ResultCsv[T],
    report: Callable[[int, int, T], None],
) -> list[T]:
    """Run ``one(key)`` for every key of ``keys`` not already in ``out`` (read by
    ``table``; a line says how many were) after ``init(*init_args)`` in each worker;
    append each result's row to ``out`` as it ends (the header written if the file is
    new) and call ``report(i, len(todo), result)``. Returns every key's result in the
    order of ``keys``."""
    done = table.read(out)
    todo = [k for k in keys if k not in done]
    if done:
        print(f"resuming: {len(keys) - len(todo)} of {len(keys)} already in {out}")
    if out is not None and not out.exists():
        with open(out, "w", newline="") as fh:
            csv.writer(fh).writerow(table.columns)
    if workers > 1:
        pool = multiprocessing.get_context("spawn").Pool(workers, init, init_args)
        results = pool.imap_unordered(one, todo)
    else:
        init(*init_args)
        pool, results = None, map(one, todo)
    try:
        for i, rep in enumerate(results):
            done[table.key_of(rep)] = rep
            if out is not None:
                with open(out, "a", newline="") as fh:
                    csv.writer(fh).writerow(table.row_of(rep))
            report(i, len(todo), rep)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return [done[k] for k in keys]
