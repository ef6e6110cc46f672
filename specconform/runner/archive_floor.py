"""The least an archive of a run can take, known before the run (issue 37, part 3).

`--max-archive-size` moves raw/ and plots/ files out of the archive until it fits
(`evidence.external`); everything else stays. So a cap below what stays can never be
met, and is refused before any work (one line, exit 2) instead of after the whole run.
Raw data is not counted: under a cap it moves out by design, so its size bounds nothing.

What stays, each counted at a size no writer can go below (a lower bound: the real
archive is always larger, and the refusal never turns away a cap that could be met):

- the zip's structure: a local (30 bytes) and a central (46 bytes) header per member
  every archive has, each with the member's name under the top folder ``<run-id>/``,
  and the end record (22 bytes);
- the protocol, as given (protocol.yaml) and validated (protocol.json), each deflated
  (0.9 of zlib's best size: room for a better compressor);
- the SHA-256 digests: one per member in SHA256SUMS and, signed, one per member in the
  attestation plus its Ed25519 signature; a digest is 256 bits of entropy, so no
  compressor stores it in fewer than 32 bytes (a signature: 64).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from specconform.evidence.sha256sums import ATTESTATION_NAME, SUMS_NAME, UNSIGNED_NAME
from specconform.protocol.load import LoadedProtocol, canonical_json
from specconform.util.errors import UsageError

# Members every archive has (runner.execute writes them; seal adds SHA256SUMS and the
# attestation or UNSIGNED).
FIXED_MEMBERS = (
    "protocol.yaml",
    "protocol.json",
    "run.json",
    "results/tests.json",
    "results/tests.csv",
    "verdict.json",
    "environment.json",
    "volatile.json",
    "log.txt",
    SUMS_NAME,
)
LOCAL_HEADER, CENTRAL_HEADER, END_RECORD = 30, 46, 22  # zip's fixed header sizes (APPNOTE)
DIGEST_BYTES = 32  # a sha256: 256 bits of entropy
SIGNATURE_BYTES = 64  # an Ed25519 signature
COMPRESSOR_MARGIN = 0.9  # of zlib's level-9 size: a better deflater may do this much better


@dataclass(frozen=True)
class ArchiveFloor:
    """Bytes an archive of the run takes at least, by part."""

    headers: int  # zip headers of the fixed members and the end record
    protocol: int  # protocol.yaml + protocol.json, deflated
    digests: int  # SHA256SUMS and, signed, the attestation's digests and signature

    @property
    def total(self) -> int:
        return self.headers + self.protocol + self.digests


def archive_floor(loaded: LoadedProtocol, run_id: str, *, signed: bool) -> ArchiveFloor:
    members = [*FIXED_MEMBERS, ATTESTATION_NAME if signed else UNSIGNED_NAME]
    headers = END_RECORD + sum(
        LOCAL_HEADER + CENTRAL_HEADER + 2 * len(f"{run_id}/{name}".encode()) for name in members
    )
    as_json = (canonical_json(loaded.data) + "\n").encode()
    protocol = sum(
        int(COMPRESSOR_MARGIN * len(zlib.compress(data, 9))) for data in (loaded.source, as_json)
    )
    summed = len(members) - 1  # SHA256SUMS lists every member but itself
    digests = DIGEST_BYTES * summed
    if signed:  # the attestation's subjects: every member but itself, and its signature
        digests += DIGEST_BYTES * summed + SIGNATURE_BYTES
    return ArchiveFloor(headers, protocol, digests)


def check_archive_floor(
    loaded: LoadedProtocol, max_size: int, *, run_id: str | None = None, signed: bool = False
) -> ArchiveFloor:
    """Refuse a --max-archive-size below `archive_floor` (one line naming the estimate
    and its parts); returns the floor. `run_id`: the run's (default: a fresh run's)."""
    if run_id is None:
        from specconform.runner.execute import make_run_id

        run_id = make_run_id(loaded, None)
    floor = archive_floor(loaded, run_id, signed=signed)
    if max_size < floor.total:
        raise UsageError(
            f"--max-archive-size {max_size}: every archive of {loaded.path.name} takes at "
            f"least {floor.total} bytes ({floor.protocol} protocol, {floor.headers} zip "
            f"headers, {floor.digests} digests; only raw/ and plots/ can move out): "
            "raise the limit"
        )
    return floor
