"""The evidence commands: `verify`, `report` and `keygen` (registered by specconform.cli).

Each command prints one line on stderr for an error and exits with the documented code
(0 valid/done, 2 usage, 3 evidence invalid); output files are written to a temporary
file and renamed, so a failure leaves no partial output. None of them imports torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from specconform.cli.options import error_line, path_option
from specconform.util.errors import SpecconformError, UsageError

_VERIFY_HELP = """Verify an evidence archive offline.

\b
Checks that every digest matches SHA256SUMS, that no file is missing or added, that the
attestation covers exactly the archive's files and is signed by the key in --pubkey, and
that every test statistic and the verdict, recomputed from the raw data, equal what the
archive states.

\b
Signature rule: exit 0 requires either --pubkey (the archive must then carry a valid
signature by that key; an UNSIGNED archive is invalid) or --skip-signature (everything
but the signer is checked; use it for archives sealed with --no-sign). Without either,
verify refuses with exit 2: an archive checked against no key proves nothing about who
produced it.

\b
Hostile input: entries other than regular files (directories, symlinks, devices),
duplicates, names outside the archive's one top folder, compression above 200:1 and
more than 4 GiB inflated in all are refused (exit 3) from the declared sizes, and
again while inflating, a chunk at a time: an entry that inflates past its declared
size or ratio, ends early, hides bytes after its data or fails its CRC is refused
there. Memory stays flat in the archive's size: members above 1 MiB are not held but
streamed from the zip (raw/samples.csv of a 10^6-seed fp32_t2 run: 244 MB; verify's
peak RSS 221 MiB at 10^5 seeds, 243 MiB at 10^6) and checked against their sha256;
what is read whole (JSON, a kind that parses a raw file at once) stays within 48 MiB,
so reading any archive stays under 512 MiB.

\b
Files kept beside the archive (--max-archive-size): external/MANIFEST.json lists them
with their sizes and sha256 (the signature covers it); those found in
<archive>.external/ must match (else exit 3); raw files absent there leave the tests
unrecomputable: exit 3 naming them, or with --skip-external exit 0 saying
"recomputed: NOT DONE" and which files.

\b
Exit codes: 0 valid; 2 usage (missing archive or key file, no --pubkey nor
--skip-signature); 3 invalid (the message names the first failing file or field).
"""


def _fail(error: SpecconformError) -> None:
    click.echo(error_line(error), err=True)
    # SystemExit, not click's Exit: click returns Exit's code silently when the caller
    # runs it with standalone_mode=False, which specconform.cli.main does.
    sys.exit(error.exit_code)


@click.command("verify", help=_VERIFY_HELP)
@click.argument("archive", type=click.Path(path_type=Path))
@path_option("--pubkey", help="Ed25519 public key (PEM) the archive must be signed with.")
@click.option(
    "--skip-signature",
    is_flag=True,
    help="Do not check who signed: digests and recomputation only.",
)
@click.option(
    "--skip-external",
    is_flag=True,
    help="An archive written with --max-archive-size whose external raw files are not "
    "beside it: check everything else and say which tests were not recomputed.",
)
def verify_command(
    archive: Path, pubkey: Path | None, skip_signature: bool, skip_external: bool
) -> None:
    from specconform.verification import require_signature_choice, verify_archive

    try:
        require_signature_choice(
            pubkey, skip_signature, "--pubkey", "--pubkey FILE", "--skip-signature"
        )
        report = verify_archive(archive, pubkey, skip_external=skip_external)
    except SpecconformError as error:
        _fail(error)
    click.echo("\n".join(report.lines()))
    _echo_diagnosis(archive)


def _echo_diagnosis(archive: Path) -> None:
    """After a valid archive's lines: where its failing rows differ (specconform.diagnosis,
    from the archive alone), so a reviewer sees it offline; nothing for a passing run."""
    from specconform.report.terminal import diagnosis_lines

    lines = diagnosis_lines(archive)
    if lines:
        click.echo("where it differs:\n" + "\n".join(lines))


@click.command("report")
@click.argument("archives", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html"]),
    default="md",
    show_default=True,
    help="Markdown for a pull request, or HTML with plots.",
)
@path_option("--out", help="Write to FILE (atomically) instead of standard output.")
@click.option(
    "--details", is_flag=True, help="Append every test, per-group tables, seed ranges and coverage."
)
@path_option("--pubkey", help="Verify every archive against this Ed25519 public key first.")
@click.option(
    "--pr",
    "pr_page",
    is_flag=True,
    help="One page for a pull request (the default when the archives are of more than one "
    "kind): failing archives and a card per failing test first, functional checks, "
    "distribution (primary and replication side by side), quality, performance and the "
    "evidence table; Markdown, or HTML with --format html.",
)
def report_command(
    archives: tuple[Path, ...],
    fmt: str,
    out: Path | None,
    details: bool,
    pubkey: Path | None,
    pr_page: bool,
) -> None:
    """Turn one or more archives (primary run first, then replications) into a report.

    \b
    Exit codes: 0 written; 2 usage (an archive not found, or --format html without
    the plots extra); 3 an archive unreadable (or, with --pubkey, invalid).
    """
    from specconform.evidence.jsonio import write_bytes_atomic
    from specconform.report import html_report, markdown_report

    try:
        if pr_page or (fmt == "md" and len(_kinds(archives)) > 1):
            from specconform.report.pr import pr_markdown
            from specconform.report.pr_html import pr_html

            render_pr = pr_html if fmt == "html" else pr_markdown
            text = render_pr(list(archives), pubkey=pubkey)
        else:
            render = html_report if fmt == "html" else markdown_report
            text = render(list(archives), details=details, pubkey=pubkey)
        if out is not None:
            try:
                write_bytes_atomic(out, text.encode())
            except OSError as exc:
                raise UsageError(f"{out}: cannot write report: {exc.strerror}") from None
    except SpecconformError as error:
        _fail(error)
    if out is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"report: {out}")


def _kinds(archives) -> set[str]:
    """The protocol kinds of the archives (run.json `kind`), read without verifying."""
    from specconform.evidence.reader import read_archive

    return {str(read_archive(Path(a)).json_object("run.json").get("kind")) for a in archives}


@click.command("keygen")
@path_option(
    "--out", "prefix", required=True, help="Writes PREFIX.key (private, mode 0600) and PREFIX.pub."
)
def keygen_command(prefix: Path) -> None:
    """Create an Ed25519 signing key pair: PREFIX.key (PEM PKCS#8, mode 0600) and
    PREFIX.pub (PEM), creating PREFIX's folder if needed. Never overwrites: exit 2 if
    either file exists.

    \b
    Exit codes: 0 written; 2 usage (a file exists, or the folder is not writable).
    """
    try:
        key_path, pub_path = write_key_pair(prefix)
    except SpecconformError as error:
        _fail(error)
    click.echo(f"private key: {key_path}\npublic key: {pub_path}")


def write_key_pair(prefix: Path) -> tuple[Path, Path]:
    """Write PREFIX.key and PREFIX.pub without ever overwriting; both or neither."""
    from specconform.evidence.signing import generate_key_pem

    key_path = prefix.with_name(prefix.name + ".key")
    pub_path = prefix.with_name(prefix.name + ".pub")
    for path in (key_path, pub_path):
        try:
            taken = path.exists() or path.is_symlink()
        except OSError as exc:  # a name too long for the file system
            raise UsageError(f"--out {str(prefix)[:200]}: {exc.strerror}") from None
        if taken:
            raise UsageError(f"{path}: already exists; keygen never overwrites a key")
    if not prefix.name or prefix.name in (".", ".."):
        raise UsageError(
            f"--out {prefix}: give a file prefix such as DIR/ci (writes DIR/ci.key and DIR/ci.pub)"
        )
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{prefix.parent}: cannot create the key folder: {exc.strerror or exc}"
        ) from None
    private_pem, public_pem = generate_key_pem()
    written: list[Path] = []
    try:
        for path, data, mode in ((key_path, private_pem, 0o600), (pub_path, public_pem, 0o644)):
            _create_exclusive(path, data, mode)
            written.append(path)
    except FileExistsError as exc:
        _remove(written)
        raise UsageError(f"{exc.filename}: already exists; keygen never overwrites a key") from None
    except OSError as exc:
        _remove(written)
        raise UsageError(f"{prefix}: cannot write key pair: {exc.strerror}") from None
    return key_path, pub_path


def _create_exclusive(path: Path, data: bytes, mode: int) -> None:
    """Write a temporary file with `mode`, then link it into place (fails if `path`
    exists): the key is never visible half-written or with looser permissions."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # exactly `mode`, whatever the umask
            f.write(data)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


COMMANDS = (verify_command, report_command, keygen_command)
# The names specconform.cli registers.
verify = verify_command
report = report_command
keygen = keygen_command
