"""Files kept beside an archive: ``--max-archive-size`` (MLPerf's hash-then-truncate).

A pull request may cap attachments (25 MB on GitHub). When the sealed zip would exceed
the cap, ``seal`` moves raw/ and plots/ files out of the run directory, largest first,
into ``<run-dir>.external/`` (kept beside ``<run-dir>.zip``) until the zip fits, and
lists each with its size and sha256 in the archive member ``external/MANIFEST.json``::

    {"directory": "<run-id>.external", "max_archive_size": int,
     "files": [{"path": "raw/samples.csv", "size": int, "sha256": "<64 hex>"}, ...]}

The manifest is an ordinary member: SHA256SUMS and the signed attestation cover it, so
the signature binds the external files' digests. ``verify`` checks every external file
found beside the archive against the manifest (a wrong size or digest is tampering:
exit 3) and, with all of them present, recomputes as usual; when some are absent it says
which, and which evidence cannot be recomputed without them.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specconform.evidence.jsonio import canonical_json_bytes
from specconform.evidence.sha256sums import check_member_name, sha256_file
from specconform.util.errors import EvidenceError, UsageError

MANIFEST_NAME = "external/MANIFEST.json"
EXTERNAL_SUFFIX = ".external"
# Only data may leave the archive: what a reviewer reads first (protocol, run, results,
# verdict, environment, log, seal files) always stays in it.
MOVABLE_PREFIXES = ("raw/", "plots/")
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """'25MB' (10**6), '500KiB' (2**10), '1000000' (bytes) -> bytes; UsageError on
    anything else, zero or negative."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise UsageError(
            f"--max-archive-size {text!r}: not a size (examples: 25MB, 500KiB, 1000000)"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise UsageError(f"--max-archive-size {text!r}: must be more than 0 bytes")
    return size


def external_dir_for(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name + EXTERNAL_SUFFIX)


def movable_files(run_dir: Path, names: list[str]) -> list[str]:
    """Data files still in the run directory, largest first (ties by name)."""
    found = [n for n in names if n.startswith(MOVABLE_PREFIXES)]
    return sorted(found, key=lambda n: (-(run_dir / n).stat().st_size, n))


def move_out(run_dir: Path, name: str) -> dict:
    """Hash `name`, move it to the external folder, return its manifest entry."""
    source = run_dir / name
    entry = {"path": name, "size": source.stat().st_size, "sha256": sha256_file(source)}
    target = external_dir_for(run_dir) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, target)
    parent = source.parent
    while parent != run_dir and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return entry


def manifest_bytes(run_id: str, max_size: int, entries: list[dict]) -> bytes:
    return canonical_json_bytes(
        {
            "directory": run_id + EXTERNAL_SUFFIX,
            "max_archive_size": max_size,
            "files": sorted(entries, key=lambda e: e["path"]),
        }
    )


@dataclass(frozen=True)
class ExternalCheck:
    """What verify found beside the archive: the files present (checked; read from disk
    again when a kind asks, never held here) and absent."""

    directory: Path
    present: dict[str, tuple[Path, int, str]]  # name -> (path, size, sha256)
    absent: tuple[str, ...]

    def lines(self) -> list[str]:
        if not self.present and not self.absent:
            return []
        out = [
            f"  external: {len(self.present)} file(s) beside the archive in {self.directory} "
            "match external/MANIFEST.json"
        ]
        if self.absent:
            out.append(f"  external: ABSENT: {', '.join(self.absent)}")
        return out


def check_external(zip_path: Path, top: str, manifest: bytes) -> ExternalCheck:
    """Read the manifest, check every listed file present beside the archive (size and
    sha256: a mismatch raises EvidenceError), and list the absent ones."""
    entries = _entries(manifest)
    stem = zip_path.name[:-4] if zip_path.name.endswith(".zip") else zip_path.name
    candidates = [
        zip_path.with_name(stem + EXTERNAL_SUFFIX),
        zip_path.with_name(top + EXTERNAL_SUFFIX),
    ]
    directory = next((d for d in candidates if d.is_dir()), candidates[0])
    present: dict[str, tuple[Path, int, str]] = {}
    absent = []
    for entry in entries:
        path = directory / entry["path"]
        if not path.is_file():
            absent.append(entry["path"])
            continue
        # Size first (a stat), then the digest in chunks: an external samples.csv can be
        # hundreds of MB (issue 38).
        if path.stat().st_size != entry["size"] or sha256_file(path) != entry["sha256"]:
            raise EvidenceError(f"{path}: does not match its size and sha256 in {MANIFEST_NAME}")
        present[entry["path"]] = (path, entry["size"], entry["sha256"])
    return ExternalCheck(directory, present, tuple(absent))


def _entries(manifest: bytes) -> list[dict[str, Any]]:
    import json

    try:
        files = json.loads(manifest)["files"]
        entries = [
            {"path": str(f["path"]), "size": int(f["size"]), "sha256": str(f["sha256"])}
            for f in files
        ]
    except (ValueError, KeyError, TypeError):
        raise EvidenceError(f"{MANIFEST_NAME}: malformed") from None
    for entry in entries:
        check_member_name(str(entry["path"]))
        if not re.fullmatch(r"[0-9a-f]{64}", str(entry["sha256"])):
            raise EvidenceError(f"{MANIFEST_NAME}: {entry['path']}: sha256 is not 64 hex digits")
    return entries
