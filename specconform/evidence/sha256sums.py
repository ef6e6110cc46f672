"""`SHA256SUMS`: the digest list a reviewer checks with plain `sha256sum -c SHA256SUMS`.

Format (GNU coreutils text mode): one line per file, ``<64 hex>  <relative/path>``,
sorted by path, POSIX separators. It lists every file of the run directory except
itself and the attestation (which signs SHA256SUMS in turn). File names that
`sha256sum` would have to escape (newline, backslash) are refused rather than escaped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from specconform.util.errors import EvidenceError

SUMS_NAME = "SHA256SUMS"
ATTESTATION_NAME = "attestation.dsse.json"
UNSIGNED_NAME = "UNSIGNED"
VOLATILE_NAME = "volatile.json"
# Files that SHA256SUMS cannot list: itself, and the attestation that covers it.
NOT_IN_SUMS = frozenset({SUMS_NAME, ATTESTATION_NAME})

_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_member_name(name: str) -> None:
    """Refuse names that are unsafe in a zip or that sha256sum would escape."""
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\n" in name
        or "\r" in name
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise EvidenceError(f"{name!r}: file name not allowed in evidence")


def run_dir_files(run_dir: Path) -> list[str]:
    """Every regular file under `run_dir` as a sorted POSIX relative path.

    Symlinks are refused: their target is outside what the digests can vouch for.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise EvidenceError(f"{run_dir}: run directory not found")
    names = []
    for path in run_dir.rglob("*"):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_symlink():
            raise EvidenceError(f"{rel}: symlinks are not allowed in a run directory")
        if path.is_file():
            check_member_name(rel)
            names.append(rel)
    return sorted(names)


def format_sums(digests: Mapping[str, str]) -> bytes:
    """SHA256SUMS text for {relative path: hex digest}, sorted by path."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode()


def parse_sums(data: bytes) -> dict[str, str]:
    """Parse SHA256SUMS text into {path: hex digest}; raise on any malformed line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EvidenceError(f"{SUMS_NAME}: not UTF-8 text") from None
    digests: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.match(line)
        if match is None:
            raise EvidenceError(f"{SUMS_NAME}: line {number} is not '<sha256>  <path>'")
        digest, name = match.groups()
        check_member_name(name)
        if name in digests:
            raise EvidenceError(f"{SUMS_NAME}: {name} listed twice")
        digests[name] = digest
    return digests


def sums_for(files: Iterable[str], digest_of) -> dict[str, str]:
    """{name: digest_of(name)} for every name SHA256SUMS must list."""
    return {name: digest_of(name) for name in files if name not in NOT_IN_SUMS}


def write_sha256sums(run_dir: Path) -> None:
    """Write `run_dir/SHA256SUMS` over every file except itself and the attestation."""
    from specconform.evidence.jsonio import write_bytes_atomic

    run_dir = Path(run_dir)
    digests = sums_for(run_dir_files(run_dir), lambda name: sha256_file(run_dir / name))
    write_bytes_atomic(run_dir / SUMS_NAME, format_sums(digests))
