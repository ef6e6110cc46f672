"""Evaluate a distribution protocol from its raw data: every pre-registered test, the
coverage, out-of-support and engine-error rows, and the family-wise verdict.

Raw data (written by the runner): ``raw/samples.csv`` (columns in :mod:`.context`) and
``raw/reference.json`` (:mod:`.reference`). Imports no torch: ``verify`` recomputes
verdicts on a laptop.
"""

from __future__ import annotations

from specconform.results import Evaluation, RawData
from specconform.stats.reference import Reference

from .fixed import TESTS, evaluate_fixed
from .sequential import evaluate_sequential

__all__ = ["TESTS", "evaluate", "evaluate_frames"]


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute every test and the verdict from a run's raw files."""
    return evaluate_frames(protocol, raw.csv("raw/samples.csv"), raw.json("raw/reference.json"))


def evaluate_frames(protocol: dict, samples, reference: dict | Reference) -> Evaluation:
    """Same as :func:`evaluate` from in-memory data: ``samples`` a pandas DataFrame with the
    columns of samples.csv, ``reference`` the dict of reference.json or a parsed
    :class:`Reference` (which calibration reuses across replications)."""
    ref = reference if isinstance(reference, Reference) else Reference(reference)
    if protocol.get("sequential"):  # anytime-valid mode: the e-process decides
        return evaluate_sequential(protocol, samples, ref)
    return evaluate_fixed(protocol, samples, ref)
