"""`verify_archive`: check an evidence archive offline, failing at the first problem.

Checks, in order (each failure raises EvidenceError naming the file or field):

1. the zip is readable in bounded memory (`reader`: regular files only, no duplicates,
   safe names under one top folder, compression ratio and inflated size bounded), every
   entry decompresses (CRC);
2. `SHA256SUMS` is present and well formed; exactly one of `attestation.dsse.json`
   (signed) or `UNSIGNED` is present;
3. the files are exactly those SHA256SUMS lists plus SHA256SUMS and the attestation:
   none missing, none added; every digest matches;
4. signed archives: the envelope is well formed, its subjects are exactly every file
   but the attestation with matching digests, its predicate names this run (run_id,
   protocol_hash) and verdict; with a public key, a signature by that key is valid;
5. the top folder is the run id of `run.json`;
6. with external/MANIFEST.json (``--max-archive-size``), every listed file found in
   ``<archive>.external/`` matches its size and sha256 (see `external`); raw files
   absent there are named, and without them nothing is recomputed;
7. every test and the verdict, recomputed from protocol.json and raw/, equal what
   results/ and verdict.json state (see `recompute`).

Signature policy (library): `pubkey=None` checks everything except the signature itself
and says so in the report (`signature` = "not checked" or "unsigned"); `trusted` is
True only when a signature by the given key was verified. With a public key, an
unsigned archive is invalid. The CLI adds the policy that exit 0 requires either
--pubkey or an explicit --skip-signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specconform.evidence.external import MANIFEST_NAME, check_external
from specconform.evidence.reader import ArchiveContents, read_archive
from specconform.evidence.sha256sums import (
    ATTESTATION_NAME,
    NOT_IN_SUMS,
    SUMS_NAME,
    UNSIGNED_NAME,
    parse_sums,
)
from specconform.evidence.signing import check_signature, load_public_key, open_envelope
from specconform.evidence.zipcheck import one_line
from specconform.util.errors import EvidenceError, SpecconformError, UsageError
from specconform.verification.recompute import check_recomputation, reevaluate_archive


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_archive` established about one archive (it raises on any failure)."""

    archive: Path
    run_id: str
    files_checked: int
    signed: bool
    signature: str  # "valid", "not checked" (signed, no key given) or "unsigned"
    keyid: str | None
    tests_recomputed: int
    verdict: str
    warnings: tuple[str, ...] = field(default=())
    # --max-archive-size archives: what was found beside the archive, and the raw files
    # whose absence left the tests unrecomputed (then tests_recomputed is 0).
    external: tuple[str, ...] = field(default=())
    not_recomputed: tuple[str, ...] = field(default=())

    @property
    def trusted(self) -> bool:
        """True only if a signature by the caller's public key was verified."""
        return self.signature == "valid"

    def lines(self) -> list[str]:
        """Human-readable summary, one fact per line."""
        signature = {
            "valid": f"valid Ed25519 signature by key {self.keyid}",
            "not checked": "present but NOT checked (no public key given)",
            "unsigned": "none: the archive is UNSIGNED",
        }[self.signature]
        return [
            f"verified: {self.archive}",
            f"  run: {self.run_id}",
            f"  files: {self.files_checked} digests match SHA256SUMS, none missing or added",
            f"  signature: {signature}",
            *self.external,
            (
                f"  recomputed: NOT DONE: the tests and the verdict ({self.verdict}) need "
                f"{', '.join(self.not_recomputed)}, absent beside the archive"
                if self.not_recomputed
                else f"  recomputed: {self.tests_recomputed} tests and the verdict "
                f"({self.verdict}) match the archive"
            ),
            *(f"  warning: {w}" for w in self.warnings),
        ]


def require_signature_choice(
    pubkey, skip_signature: bool, key: str, key_arg: str, skip: str
) -> None:
    """Exactly one of a public key and skipping the signature check (the API and the CLI
    name them ``key``/``key_arg`` and ``skip`` in their own words); UsageError otherwise."""
    if pubkey is not None and skip_signature:
        raise UsageError(f"{key} and {skip} contradict each other")
    if pubkey is None and not skip_signature:
        raise UsageError(
            f"pass {key_arg} to check the signature, or {skip} "
            "to check digests and recomputation only"
        )


def verify_archive(
    zip_path: Path, pubkey: Path | None = None, *, skip_external: bool = False
) -> VerifyReport:
    """Verify `zip_path`; return what was established, or raise EvidenceError (or
    UsageError for a missing archive or unreadable key file), its message one line.

    An archive with external/MANIFEST.json (``--max-archive-size``): every listed file
    found beside it must match its size and sha256; raw files absent there make the
    recomputation impossible, which raises EvidenceError naming them unless
    `skip_external` (then the report says "recomputed: NOT DONE" and which files)."""
    try:
        return _verify_archive(zip_path, pubkey, skip_external=skip_external)
    except SpecconformError as exc:
        raise one_line(exc) from None


def _verify_archive(zip_path: Path, pubkey: Path | None, *, skip_external: bool) -> VerifyReport:
    public = load_public_key(pubkey) if pubkey is not None else None
    contents = read_archive(zip_path)
    signed = _check_seal_files(contents)
    _check_digests(contents)
    keyid = None
    if signed:
        keyid = _check_attestation(contents, public)
    elif public is not None:
        raise EvidenceError(
            f"{UNSIGNED_NAME}: the archive is unsigned, but a public key "
            "was given to check its signature"
        )
    run = contents.json_object("run.json")
    if run.get("run_id") != contents.top:
        raise EvidenceError(
            f"run.json: run_id {run.get('run_id')!r} differs from the "
            f"archive's top folder {contents.top!r}"
        )
    found = None
    if MANIFEST_NAME in contents.files:
        found = check_external(Path(zip_path), contents.top, contents.files[MANIFEST_NAME])
        contents = contents.with_external(found.present)
    needed = tuple(n for n in (found.absent if found else ()) if n.startswith("raw/"))
    if needed and not skip_external:
        raise EvidenceError(
            f"{MANIFEST_NAME}: {', '.join(needed)} not found in {found.directory if found else ''}; "
            "every test is recomputed from raw/: put the external files beside the archive, "
            "or pass --skip-external to check everything else"
        )
    tests_recomputed, verdict = 0, contents.json_object("verdict.json").get("verdict")
    if not needed:
        recomputed = reevaluate_archive(contents)
        try:
            check_recomputation(contents, recomputed)
        except EvidenceError as exc:
            raise EvidenceError(f"{exc}{_version_note(contents)}") from None
        # equal to the stated verdict under the archive's own results schema (checked)
        tests_recomputed = len(recomputed.tests)

    signature = "valid" if keyid else ("not checked" if signed else "unsigned")
    warnings = []
    if signature != "valid":
        warnings.append("nothing binds this archive to a signer: verify with --pubkey")
    return VerifyReport(
        archive=Path(zip_path),
        run_id=contents.top,
        files_checked=len(contents.files),
        signed=signed,
        signature=signature,
        keyid=keyid,
        tests_recomputed=tests_recomputed,
        verdict=str(verdict),
        warnings=tuple(warnings),
        external=tuple(found.lines()) if found else (),
        not_recomputed=needed,
    )


def _version_note(contents: ArchiveContents) -> str:
    """When numpy or scipy here differ from the run's (environment.json), say so: the
    kernel protocols' laws and the TV bootstrap draw with numpy Generator methods, whose
    streams numpy does not keep across versions (docs/peers.md), so a recomputation can
    differ for that reason alone."""
    import numpy
    import scipy

    try:
        packages = contents.json_object("environment.json").get("packages") or {}
    except EvidenceError:
        return ""
    here = {"numpy": numpy.__version__, "scipy": scipy.__version__}
    differ = [f"{k} {packages[k]} (here {v})" for k, v in here.items() if packages.get(k, v) != v]
    if not differ:
        return ""
    return (
        f"; note: the run used {', '.join(differ)}: recompute with the run's versions "
        "(laws drawn by numpy Generator methods change across numpy versions)"
    )


def _check_seal_files(contents: ArchiveContents) -> bool:
    """Whether the archive is signed; raise unless exactly one seal marker is present."""
    if SUMS_NAME not in contents.files:
        raise EvidenceError(f"{SUMS_NAME}: missing from the archive")
    has_attestation = ATTESTATION_NAME in contents.files
    has_marker = UNSIGNED_NAME in contents.files
    if has_attestation and has_marker:
        raise EvidenceError(
            f"{UNSIGNED_NAME}: present beside {ATTESTATION_NAME}; an "
            "archive is either signed or unsigned"
        )
    if not has_attestation and not has_marker:
        raise EvidenceError(f"{ATTESTATION_NAME}: missing (and no {UNSIGNED_NAME} marker)")
    return has_attestation


def _check_digests(contents: ArchiveContents) -> None:
    listed = parse_sums(contents.files[SUMS_NAME])
    for name in sorted(listed):
        if name not in contents.files:
            raise EvidenceError(f"{name}: listed in {SUMS_NAME} but missing from the archive")
    for name in sorted(contents.files):
        if name not in listed and name not in NOT_IN_SUMS:
            raise EvidenceError(f"{name}: in the archive but not listed in {SUMS_NAME}")
    for name in sorted(listed):
        if contents.digest(name) != listed[name]:
            raise EvidenceError(f"{name}: sha256 does not match {SUMS_NAME}")


def _check_attestation(contents: ArchiveContents, public) -> str | None:
    """Check the envelope against the files; verify the signature when `public` is given.
    Returns the verified keyid, or None if no key was given."""
    statement, payload, signatures = open_envelope(
        contents.files[ATTESTATION_NAME], ATTESTATION_NAME
    )
    keyid = None
    if public is not None:
        # Signature first: nothing in an unauthenticated statement deserves a finer message.
        keyid = check_signature(payload, signatures, public, ATTESTATION_NAME)
    subjects = _subjects(statement)
    files = set(contents.files) - {ATTESTATION_NAME}
    uncovered, vanished = sorted(files - set(subjects)), sorted(set(subjects) - files)
    if uncovered:
        raise EvidenceError(f"{ATTESTATION_NAME}: no subject for file {uncovered[0]}")
    if vanished:
        raise EvidenceError(
            f"{ATTESTATION_NAME}: subject {vanished[0]} is missing from the archive"
        )
    for name in sorted(files):
        if contents.digest(name) != subjects[name]:
            raise EvidenceError(f"{ATTESTATION_NAME}: subject {name} digest differs from the file")
    _check_predicate(statement.get("predicate"), contents)
    return keyid


def _subjects(statement: dict) -> dict[str, str]:
    subjects: dict[str, str] = {}
    try:
        for entry in statement["subject"]:
            name, digest = entry["name"], entry["digest"]["sha256"]
            if name in subjects:
                raise EvidenceError(f"{ATTESTATION_NAME}: subject {name} listed twice")
            subjects[name] = digest
    except (KeyError, TypeError):
        raise EvidenceError(f"{ATTESTATION_NAME}: malformed subject list") from None
    return subjects


def _check_predicate(predicate, contents: ArchiveContents) -> None:
    if not isinstance(predicate, dict):
        raise EvidenceError(f"{ATTESTATION_NAME}: predicate missing")
    run = contents.json_object("run.json")
    verdict = contents.json_object("verdict.json")
    expected = {
        "run_id": run.get("run_id"),
        "protocol_hash": run.get("protocol_hash"),
        "verdict": verdict.get("verdict"),
    }
    for key, value in expected.items():
        if predicate.get(key) != value:
            raise EvidenceError(
                f"{ATTESTATION_NAME}: predicate.{key} "
                f"{predicate.get(key)!r} differs from the archive's {value!r}"
            )
