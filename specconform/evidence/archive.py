"""Sealing a run directory into a reproducible, optionally signed archive.

`seal(run_dir, key=..., sign=...)` writes `SHA256SUMS`, then either the signed
attestation (`attestation.dsse.json`) or the `UNSIGNED` marker, then zips the run
directory into `<run_dir>.zip`.

Reproducible bytes. Entries are sorted, all under one top folder named after the run id;
every entry has the timestamp 1980-01-01 00:00:00, Unix permissions 0644, no extra
fields, and is compressed with ZIP_DEFLATED at level 9; no directory entries are
written. File system times, permissions, owners and directory order therefore never reach
the archive: the same run directory always seals to the same bytes (on one machine: a
different zlib could compress differently).

The volatile file. `volatile.json` (times, host, pid) is the one file declared to differ
between two identical runs. It stays an ordinary member: listed in SHA256SUMS and in the
attestation like every other file, so `sha256sum -c` and the signature protect it too.
The price is that SHA256SUMS and the attestation, which are functions of every member's
digest, differ between two such runs as well; since `verify` proves both are exactly
derived from the members, they add no independent content, and a reviewer checks
reproducibility by comparing every other member (see `reproducibility.compare_archives`).
The alternative, leaving volatile.json out of SHA256SUMS, would leave it unprotected in
unsigned archives and break "sha256sum -c covers every file".

Unsigned archives carry an `UNSIGNED` marker file (listed in SHA256SUMS) so that an
unsigned archive says so itself, instead of merely lacking a file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from specconform.evidence import external
from specconform.evidence.jsonio import write_bytes_atomic
from specconform.evidence.sha256sums import (
    ATTESTATION_NAME,
    SUMS_NAME,
    UNSIGNED_NAME,
    run_dir_files,
    sha256_file,
    write_sha256sums,
)
from specconform.evidence.signing import (
    build_statement,
    load_private_key,
    resolve_signing_key,
    sign_statement,
)
from specconform.util.errors import EvidenceError, UsageError

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
ZIP_FILE_MODE = 0o100644  # regular file, rw-r--r--
ZIP_LEVEL = 9
UNSIGNED_TEXT = (
    b"This evidence archive is UNSIGNED: it was sealed with --no-sign.\n"
    b"SHA256SUMS lists every file, but nothing binds the archive to a key;\n"
    b"verify it with: specconform verify ARCHIVE --skip-signature\n"
)


def seal(run_dir: Path, *, key: Path | None, sign: bool, max_size: int | None = None) -> Path:
    """Seal `run_dir` and zip it to `<run_dir>.zip`; return the zip's path.

    With `sign`, the key is `key`, else $SPECCONFORM_SIGNING_KEY (UsageError if neither);
    the key is loaded before anything is written. Re-sealing a directory replaces the
    previous seal files. Raises EvidenceError if the run directory lacks `run.json`
    (with `run_id` and `protocol_hash`) or `verdict.json`.

    `max_size` (bytes, ``--max-archive-size``): raw/ and plots/ files are moved beside
    the archive, largest first, until the zip fits, and listed with their digests in
    external/MANIFEST.json (see `external`); UsageError, with every file put back and
    no zip left, if the zip cannot fit even without them.
    """
    run_dir = Path(run_dir)
    private_key = load_private_key(resolve_signing_key(key, sign=True)) if sign else None
    run = _read_json(run_dir, "run.json")
    verdict = _read_json(run_dir, "verdict.json")
    predicate = {
        "run_id": _field(run, "run_id", "run.json"),
        "protocol_hash": _field(run, "protocol_hash", "run.json"),
        "verdict": _field(verdict, "verdict", "verdict.json"),
    }
    zip_path = run_dir.with_name(run_dir.name + ".zip")
    moved: list[dict] = []
    try:
        while True:
            _write_seal_files(run_dir, private_key, predicate, moved, max_size)
            write_reproducible_zip(run_dir, zip_path, top=predicate["run_id"])
            size = zip_path.stat().st_size
            if max_size is None or size <= max_size:
                return zip_path
            movable = external.movable_files(run_dir, run_dir_files(run_dir))
            if not movable:
                raise UsageError(
                    f"--max-archive-size {max_size}: the archive takes {size} bytes with "
                    "every raw/ and plots/ file moved out; give a larger size"
                )
            moved.append(external.move_out(run_dir, movable[0]))
    except BaseException:
        zip_path.unlink(missing_ok=True)
        _put_back(run_dir, moved)
        raise


def _write_seal_files(run_dir, private_key, predicate, moved, max_size) -> None:
    """The manifest of moved files (if any), UNSIGNED or nothing, SHA256SUMS, then the
    attestation over all of them."""
    # Remove a previous seal so the new one covers exactly the run's files.
    for stale in (ATTESTATION_NAME, UNSIGNED_NAME, SUMS_NAME):
        (run_dir / stale).unlink(missing_ok=True)
    if moved:
        manifest = run_dir / external.MANIFEST_NAME
        manifest.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(
            manifest, external.manifest_bytes(predicate["run_id"], int(max_size), moved)
        )
    if private_key is None:
        write_bytes_atomic(run_dir / UNSIGNED_NAME, UNSIGNED_TEXT)
    write_sha256sums(run_dir)
    if private_key is not None:
        subjects = {name: sha256_file(run_dir / name) for name in run_dir_files(run_dir)}
        envelope = sign_statement(build_statement(subjects, predicate), private_key)
        write_bytes_atomic(run_dir / ATTESTATION_NAME, envelope)


def _put_back(run_dir: Path, moved: list[dict]) -> None:
    """Undo `move_out` after a failed seal: the run directory is as it was given."""
    outside = external.external_dir_for(run_dir)
    for entry in moved:
        target = run_dir / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(outside / entry["path"], target)
    if moved:
        (run_dir / external.MANIFEST_NAME).unlink(missing_ok=True)
        shutil.rmtree(outside, ignore_errors=True)


def write_reproducible_zip(src_dir: Path, zip_path: Path, *, top: str) -> None:
    """Zip every file of `src_dir` under folder `top/`, with reproducible bytes.

    Written to a temporary file and renamed, so a failed seal leaves no partial zip.
    """
    if not top or "/" in top or top in (".", ".."):
        raise EvidenceError(f"run_id {top!r} cannot name the archive's top folder")
    names = run_dir_files(src_dir)
    fd, tmp = tempfile.mkstemp(prefix=f".{zip_path.name}.", suffix=".tmp", dir=zip_path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            for name in names:
                _write_member(zf, src_dir / name, _entry(f"{top}/{name}"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, zip_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


COPY_CHUNK = 1 << 20  # bytes read at a time from a member's file


def _write_member(zf: zipfile.ZipFile, src: Path, info: zipfile.ZipInfo) -> None:
    """``zf.writestr(info, src.read_bytes())`` without holding the file: the same bytes
    (zlib's deflate output does not depend on how its input is split; the ZIP64 choice
    is made from the size given before writing, as writestr makes it from len(data)),
    at one chunk of memory, whatever the member's size (raw/samples.csv at 10^6 seeds:
    issue 38)."""
    info.file_size = src.stat().st_size
    with open(src, "rb") as fh, zf.open(info, mode="w") as dest:
        shutil.copyfileobj(fh, dest, COPY_CHUNK)


def _entry(arcname: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info._compresslevel = ZIP_LEVEL  # writestr ignores the ZipFile default for a ZipInfo
    info.create_system = 3  # Unix, whatever the sealing platform
    info.external_attr = ZIP_FILE_MODE << 16
    return info


def _read_json(run_dir: Path, name: str) -> dict:
    try:
        value = json.loads((run_dir / name).read_bytes())
    except FileNotFoundError:
        raise EvidenceError(f"cannot seal {run_dir}: {name} is missing") from None
    except ValueError:
        raise EvidenceError(f"cannot seal {run_dir}: {name} is not valid JSON") from None
    if not isinstance(value, dict):
        raise EvidenceError(f"cannot seal {run_dir}: {name} is not a JSON object")
    return value


def _field(obj: dict, key: str, name: str):
    if key not in obj:
        raise EvidenceError(f"{name}: field {key!r} is missing")
    return obj[key]
