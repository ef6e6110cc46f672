"""Checking that two runs reproduce each other: `compare_archives(a, b)`.

Two runs of one protocol with the same seeds on the same machine must give identical
evidence except for the declared volatile facts:

- `volatile.json` (times, host, pid): ignored;
- `SHA256SUMS` and `attestation.dsse.json`: derived from the members' digests, so they
  differ exactly when volatile.json does; `verify` proves each archive's are exactly
  derived from its members, so they carry nothing to compare and are ignored;
- the run id (it names the top folder and, by contract, embeds the start time): its
  occurrences in member bytes are replaced by a placeholder before comparing.

Every other member must be byte-identical and present in both. The zips as a whole
differ (they contain volatile.json); sealing one run directory twice gives identical
zip bytes.
"""

from __future__ import annotations

from pathlib import Path

from specconform.evidence.reader import read_archive
from specconform.evidence.sha256sums import ATTESTATION_NAME, SUMS_NAME, VOLATILE_NAME

DECLARED_VOLATILE = frozenset({VOLATILE_NAME, SUMS_NAME, ATTESTATION_NAME})
_RUN_ID_PLACEHOLDER = b"<run-id>"


def compare_archives(a: Path, b: Path) -> list[str]:
    """Differences between two archives outside the declared volatile facts; [] if none."""
    first, second = read_archive(a), read_archive(b)
    differences = []
    for name in sorted(set(first.files) | set(second.files)):
        if name in DECLARED_VOLATILE:
            continue
        if name not in first.files or name not in second.files:
            where = a if name not in first.files else b
            differences.append(f"{name}: missing from {where}")
            continue
        left = first.files[name].replace(first.top.encode(), _RUN_ID_PLACEHOLDER)
        right = second.files[name].replace(second.top.encode(), _RUN_ID_PLACEHOLDER)
        if left != right:
            differences.append(f"{name}: contents differ")
    return differences
