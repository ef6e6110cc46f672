"""The streamed reduction of raw/samples.csv (issue 38): per-cell counts, not per-seed rows.

Every fixed-N test of a distribution protocol reads its samples through counts: how many
samples of a group drew (t1, t2, t3) with a first draft accepted or not, and, for the
two-sample tests, on an even or an odd seed. So a group reduces to its distinct
(t1, t2, t3, first_accepted, seed parity) rows, each once with its count (:class:`Cells`),
plus what is not a cell count (:class:`GroupTally`): the sums of ``drafted`` and
``accepted``, the seeds that ended in an engine error (per seed: their batches are
reported), and the seeds with a t1 and a t2 as intervals (whether two groups' seeds
overlap decides the two-sample split). Counts add, so the reduction reads the CSV in
chunks of ``chunk_rows`` rows (:func:`tally_csv`) and holds one chunk at a time; an
in-memory frame is the one-chunk case (:func:`tally_frame`). The evaluator's results do
not depend on the chunking: counts are integers, and every statistic is computed from
them as it was from the per-seed columns (tests/toolkit/test_distribution_stream.py).

What stays per seed: the error seeds (none in a correct run) and one interval per run of
consecutive seeds with a t1 and a t2 (one per group and batch plan in practice). The
cells grow with the number of distinct (t1, t2, t3) drawn, at most the support of the
sampling law (top-k 20: 20^3 per group), not with the seed count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# Columns of raw/samples.csv the evaluator reads (``rounds`` and the rest are evidence
# for people and for `replay`, not for the tests).
READ = ("group", "seed", "t1", "t2", "t3", "first_accepted", "drafted", "accepted")
FINISH = "finish_reason"
CELL_COLUMNS = ("t1", "t2", "t3", "first_accepted", "parity")
# Rows per chunk of the streamed read: ~100 bytes a row parsed (9 columns), ~25 MB.
CHUNK_ROWS = 1 << 18


def clamp_tokens(t: np.ndarray, vocab_size: int) -> np.ndarray:
    """Every token outside [0, vocab_size) other than -1 (not generated) becomes
    ``vocab_size``: out of support everywhere, and small enough for the int64 codes of
    (t1, t2, t3)."""
    return np.where((t >= vocab_size) | (t < -1), vocab_size, t)


@dataclass(frozen=True)
class Cells:
    """Distinct (t1, t2, t3, first_accepted, seed parity) rows of one group, each [R]
    int64, and ``count`` [R] int64 (>= 1): how many samples drew that row."""

    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    first_accepted: np.ndarray
    parity: np.ndarray
    count: np.ndarray

    @property
    def n(self) -> int:
        """Samples in these cells."""
        return int(self.count.sum())

    def take(self, mask: np.ndarray) -> Cells:
        return Cells(*(getattr(self, c)[mask] for c in (*CELL_COLUMNS, "count")))

    def sizes(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(distinct keys ascending, samples per key): ``np.unique(return_counts=True)``
        of the per-sample keys."""
        uniq, inv = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
        return uniq, _add(inv.reshape(-1), self.count, uniq.size)

    def strata(self, keys: np.ndarray, min_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """`stats.cells.strata` of the per-sample keys: keys holding at least
        ``min_samples`` samples, ascending, and their sizes."""
        uniq, sizes = self.sizes(keys)
        keep = sizes >= min_samples
        return uniq[keep], sizes[keep]

    def counts_on(self, tokens: np.ndarray, values: np.ndarray) -> np.ndarray:
        """`stats.cells.counts_on` of the per-sample values ([C] int64 over ``tokens``)."""
        return _add(np.searchsorted(tokens, values), self.count, tokens.size)

    @classmethod
    def empty(cls) -> Cells:
        return cls(*(np.zeros(0, dtype=np.int64),) * (len(CELL_COLUMNS) + 1))


@dataclass(frozen=True)
class SeedSet:
    """A set of seeds as sorted, disjoint, non-adjacent half-open intervals."""

    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stops: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, seeds: np.ndarray) -> SeedSet:
        s = np.unique(np.asarray(seeds, dtype=np.int64))
        if s.size == 0:
            return cls()
        cut = np.flatnonzero(np.diff(s) != 1) + 1
        return cls(s[np.r_[0, cut]], s[np.r_[cut - 1, s.size - 1]] + 1)

    def union(self, other: SeedSet) -> SeedSet:
        starts = np.concatenate([self.starts, other.starts])
        stops = np.concatenate([self.stops, other.stops])
        if starts.size == 0:
            return SeedSet()
        order = np.argsort(starts, kind="stable")
        starts, stops = starts[order], np.maximum.accumulate(stops[order])
        # A new interval begins where a start lies beyond every stop before it.
        begin = np.r_[True, starts[1:] > stops[:-1]]
        idx = np.flatnonzero(begin)
        return SeedSet(starts[idx], np.r_[stops[idx[1:] - 1], stops[-1]])

    def intersects(self, other: SeedSet) -> bool:
        """Whether a seed lies in both (``np.intersect1d(a, b).size > 0``)."""
        if self.starts.size == 0 or other.starts.size == 0:
            return False
        j = np.searchsorted(other.stops, self.starts, side="right")
        inside = j < other.starts.size
        return bool(np.any(other.starts[j[inside]] < self.stops[inside]))


@dataclass(frozen=True)
class GroupTally:
    """One group's samples reduced: its cells and what is not a cell count."""

    cells: Cells
    n: int  # samples (rows) of the group
    drafted: tuple[int, int]  # (sum of drafted, sum of drafted clipped at 0)
    accepted: tuple[int, int]  # the same for accepted
    pair_seeds: SeedSet  # seeds of the samples with t1 >= 0 and t2 >= 0
    error_seeds: np.ndarray | None  # [E] seeds with finish_reason "error"; None: unrecorded

    @classmethod
    def empty(cls) -> GroupTally:
        return cls(Cells.empty(), 0, (0, 0), (0, 0), SeedSet(), np.zeros(0, dtype=np.int64))

    def mean(self, which: str) -> float | None:
        """``np.mean`` of the column (float64: exact integer sums divided by n)."""
        total = self.drafted[0] if which == "drafted" else self.accepted[0]
        return float(np.float64(total) / self.n) if self.n else None


def tally_frame(samples: pd.DataFrame, vocab_size: int) -> dict[str, GroupTally]:
    """Per-group tallies of an in-memory samples frame (one chunk)."""
    acc = _Accumulator(vocab_size)
    acc.add(samples)
    return acc.result()


def tally_csv(fh, vocab_size: int, chunk_rows: int = CHUNK_ROWS) -> dict[str, GroupTally]:
    """Per-group tallies of a samples.csv read ``chunk_rows`` rows at a time from the
    binary file ``fh``; holds one chunk and the tallies so far."""
    acc = _Accumulator(vocab_size)
    wanted = {*READ, FINISH}
    with pd.read_csv(
        fh, chunksize=chunk_rows, usecols=lambda c: c in wanted, dtype={"group": str}
    ) as chunks:
        for chunk in chunks:
            acc.add(chunk)
    return acc.result()


class _Accumulator:
    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.tallies: dict[str, GroupTally] = {}

    def add(self, frame: pd.DataFrame) -> None:
        missing = [c for c in READ if c not in frame.columns]
        if missing:
            raise KeyError(f"samples.csv has no column {missing[0]!r}")
        recorded = FINISH in frame.columns
        for name, g in frame.groupby("group", sort=True):
            cols = {c: g[c].to_numpy(dtype=np.int64) for c in READ[1:]}
            for c in ("t1", "t2", "t3"):
                cols[c] = clamp_tokens(cols[c], self.vocab_size)
            seed = cols["seed"]
            rows = np.stack(
                [cols["t1"], cols["t2"], cols["t3"], cols["first_accepted"], seed % 2], axis=1
            )
            uniq, count = np.unique(rows, axis=0, return_counts=True)
            pair = (cols["t1"] >= 0) & (cols["t2"] >= 0)
            error = (g[FINISH].astype(str) == "error").to_numpy() if recorded else None
            d, a = cols["drafted"], cols["accepted"]
            t1, t2, t3, first, parity = uniq.T
            part = GroupTally(
                Cells(t1, t2, t3, first, parity, count.astype(np.int64)),
                int(seed.size),
                (int(d.sum()), int(d.clip(min=0).sum())),
                (int(a.sum()), int(a.clip(min=0).sum())),
                SeedSet.of(seed[pair]),
                None if error is None else seed[error],
            )
            # Merged as it comes: one tally per group is held, whatever the number of
            # chunks (a merge costs the group's distinct rows, not its samples).
            held = self.tallies.get(str(name))
            self.tallies[str(name)] = part if held is None else _merge([held, part])

    def result(self) -> dict[str, GroupTally]:
        return dict(sorted(self.tallies.items()))


def _merge(parts: list[GroupTally]) -> GroupTally:
    rows = np.concatenate(
        [np.stack([getattr(p.cells, c) for c in CELL_COLUMNS], axis=1) for p in parts]
    )
    uniq, inv = np.unique(rows, axis=0, return_inverse=True)
    count = _add(inv.reshape(-1), np.concatenate([p.cells.count for p in parts]), len(uniq))
    seeds = SeedSet()
    for p in parts:
        seeds = seeds.union(p.pair_seeds)
    errors = [p.error_seeds for p in parts]
    known = [e for e in errors if e is not None]
    t1, t2, t3, first, parity = uniq.T
    return GroupTally(
        Cells(t1, t2, t3, first, parity, count),
        sum(p.n for p in parts),
        (sum(p.drafted[0] for p in parts), sum(p.drafted[1] for p in parts)),
        (sum(p.accepted[0] for p in parts), sum(p.accepted[1] for p in parts)),
        seeds,
        None if len(known) < len(errors) else np.concatenate(known),
    )


def _add(index: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``weights`` per index, [size] int64, exact (np.add.at on int64)."""
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, index, weights)
    return out
