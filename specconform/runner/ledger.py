"""The seed ledger: which seed ranges earlier runs of a protocol used.

A JSON-lines file; one entry per (run, group): protocol name and hash, run id, group,
seed range [start, stop), whether the run carried a mutant. A new clean run whose range
for a group overlaps an earlier clean run of the same protocol name is refused, naming
that run, unless the protocol declares itself an expansion of exactly that range (same
start, a superset). Mutant runs (negative controls) are recorded but neither blocked nor
blocking: they are not evidence for the protocol.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from specconform.errors import UsageError


@dataclass(frozen=True)
class LedgerEntry:
    protocol_name: str
    protocol_hash: str
    run_id: str
    group: str
    start: int
    stop: int
    mutant: str | None


def read_ledger(path: Path) -> list[LedgerEntry]:
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(LedgerEntry(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise UsageError(f"{path}: line {number} is not a ledger entry ({exc})") from None
    return entries


def check_and_reserve(path: Path, new: list[LedgerEntry], expansion=None) -> None:
    """Refuse overlaps with earlier clean runs; then append `new` (durably)."""
    earlier = read_ledger(path)
    mine = {e.run_id for e in new}
    for entry in new:
        if entry.mutant is not None:
            continue
        for old in earlier:
            if (old.mutant is not None or old.run_id in mine
                    or old.protocol_name != entry.protocol_name or old.group != entry.group):
                continue
            if old.start < entry.stop and entry.start < old.stop:
                if expansion is not None and _expands(entry, old, expansion):
                    continue
                raise UsageError(
                    f"seeds [{entry.start}, {entry.stop}) of group {entry.group!r} overlap "
                    f"[{old.start}, {old.stop}) of earlier run {old.run_id} in {path}; choose "
                    "another --offset or declare the protocol an expansion of that run")
    already = {(e.run_id, e.group) for e in earlier}
    fresh = [e for e in new if (e.run_id, e.group) not in already]
    if not fresh:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for entry in fresh:
            fh.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _expands(entry: LedgerEntry, old: LedgerEntry, expansion) -> bool:
    """The declared earlier range is exactly `old`'s, and `entry` contains it from the
    same start (e.g. 20,000 seeds including the first 5,000 of an earlier run)."""
    group_offset = old.start - expansion.of_offset
    return (old.stop - old.start == expansion.of_count and group_offset >= 0
            and entry.start == old.start and entry.stop >= old.stop)
