"""Evaluate a distribution protocol from its raw data: every pre-registered test, the
coverage, out-of-support and engine-error rows, and the family-wise verdict.

Raw data (written by the runner): ``raw/samples.csv`` (columns in :mod:`.context`) and
``raw/reference.json`` (:mod:`.reference`). Imports no torch: ``verify`` recomputes
verdicts on a laptop.

A fixed-N protocol reads samples.csv in chunks into per-cell counts (:mod:`.tally`), so
host memory does not grow with the seed count (issue 38); a sequential one reads it
whole (its e-process runs over the seeds in order).
"""

from __future__ import annotations

from specconform.results import Evaluation, RawData
from specconform.stats.reference import Reference

from .fixed import TESTS, evaluate_fixed
from .sequential import evaluate_sequential
from .tally import CHUNK_ROWS, tally_csv, tally_frame

SAMPLES = "raw/samples.csv"

__all__ = ["TESTS", "evaluate", "evaluate_frames"]


def evaluate(protocol: dict, raw: RawData, *, chunk_rows: int = CHUNK_ROWS) -> Evaluation:
    """Recompute every test and the verdict from a run's raw files (samples.csv streamed
    ``chunk_rows`` rows at a time for a fixed-N protocol)."""
    ref = Reference(raw.json("raw/reference.json"))
    if protocol.get("sequential"):
        return evaluate_sequential(protocol, raw.csv(SAMPLES), ref)
    with raw.open(SAMPLES) as fh:
        tallies = tally_csv(fh, ref.vocab_size, chunk_rows)
    return evaluate_fixed(protocol, tallies, ref)


def evaluate_frames(protocol: dict, samples, reference: dict | Reference) -> Evaluation:
    """Same as :func:`evaluate` from in-memory data: ``samples`` a pandas DataFrame with the
    columns of samples.csv, ``reference`` the dict of reference.json or a parsed
    :class:`Reference` (which calibration reuses across replications)."""
    ref = reference if isinstance(reference, Reference) else Reference(reference)
    if protocol.get("sequential"):  # anytime-valid mode: the e-process decides
        return evaluate_sequential(protocol, samples, ref)
    return evaluate_fixed(protocol, tally_frame(samples, ref.vocab_size), ref)
