"""Carry real-engine null runs across a change of the verdict's family level only.

A protocol whose only change is a larger ``verdict.numerics_reserve`` (issue 32: the
p-value family runs at alpha less the reserve) judges the same data by the same tests
and compares the same adjusted p-values with a *lower* level. A run that PASSed at the
old level therefore PASSes at the new one: nothing is re-run for it. A run that FAILed
or was INCONCLUSIVE is not carried (it must be re-run: it may now PASS, or stay what it
was). The engine is deterministic for a given offset (bench/calibration_real_engine.py
``--check-reuse``), so re-running a carried offset gives the same PASS; the carried rows
are marked ``source = carried <old hash>`` so that a reader can re-run them to check.

The two protocol files are compared on their canonical JSON (what their hashes cover)
with ``verdict.numerics_reserve`` set aside; any other difference refuses the carry. A
p-value that itself depends on the family level breaks the premise: the score test's
Monte Carlo draws follow the level (specconform.stats.score.replications_for), so a file
with ``joint_score`` tests whose draws differ at the two levels refuses the carry too.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd


def _without_reserve(data: dict) -> tuple[dict, float]:
    data = copy.deepcopy(data)
    verdict = data.get("verdict") or {}
    reserve = float(verdict.pop("numerics_reserve", 0.0) or 0.0)
    return data, reserve


def carry_reason(old_protocol: Path, new_protocol: Path) -> str:
    """Why PASS rows of ``old_protocol`` hold for ``new_protocol`` (one line), or raise
    SystemExit naming the difference that forbids it."""
    from specconform.protocol.load import load_protocol

    old, new = load_protocol(old_protocol), load_protocol(new_protocol)
    old_data, old_reserve = _without_reserve(old.data)
    new_data, new_reserve = _without_reserve(new.data)
    if old_data != new_data:
        keys = sorted(
            k for k in set(old_data) | set(new_data) if old_data.get(k) != new_data.get(k)
        )
        raise SystemExit(
            f"cannot carry runs of {old_protocol} to {new_protocol}: they differ in "
            f"{', '.join(keys)}, not only in verdict.numerics_reserve"
        )
    _same_draws(old.data, new.data)
    if new_reserve < old_reserve:
        raise SystemExit(
            f"cannot carry runs: the new numerics_reserve {new_reserve:g} is below the old "
            f"{old_reserve:g} (a PASS at a lower level does not imply one at a higher)"
        )
    return f"carried {old.hash[:12]}"


def _same_draws(old: dict, new: dict) -> None:
    from specconform.kinds.distribution.score import score_draws

    if not any(t.get("type") == "joint_score" for t in old.get("tests", [])):
        return
    before, after = score_draws(old), score_draws(new)
    if before != after:
        raise SystemExit(
            f"cannot carry runs: the joint_score tests draw {before} Monte Carlo samples at "
            f"the old family level and {after} at the new one (their p-values differ): re-run"
        )


def carried_rows(old_csv: Path, source: str, digest: str, done: set[int]) -> list[dict]:
    """The old CSV's PASS rows not yet in the new CSV, restated for protocol ``digest``."""
    old = pd.read_csv(old_csv, dtype={"failed": "string", "inconclusive": "string"})
    rows = []
    for rec in old.to_dict("records"):
        if rec["verdict"] != "PASS" or int(rec["offset"]) in done:
            continue
        rows.append(
            {
                "offset": int(rec["offset"]),
                "verdict": "PASS",
                "failed": "",
                "inconclusive": "",
                "near_ties": rec.get("near_ties", 0),
                "seconds": rec.get("seconds", ""),
                "device": rec.get("device", ""),
                "protocol_hash": digest,
                "min_p_adjusted": "",
                "source": source,
            }
        )
    return rows
