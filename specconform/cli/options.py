"""The options `run` and `gate` share (specconform.cli applies them with `run_options`).

Numbers and sizes are parsed here, so a bad value is one line and exit 2 before any work:
`--seeds 5e3` must be an exact integer, `--max-archive-size 25MB` a size.
"""

from __future__ import annotations

from pathlib import Path

import click

from specconform.util.errors import UsageError

DEFAULT_OUT = Path("reports")


def error_line(message: object) -> str:
    """``error: MESSAGE`` as one printable line: a message may quote user input (a path
    holding a newline or a carriage return, a 10,000-character value), so control
    characters are escaped and the length is bounded (protocol.load.one_line)."""
    from specconform.protocol.load import one_line

    return f"error: {one_line(str(message))}"


def _int_option(name: str, help_text: str):
    def parse(ctx, param, value):
        if value is None:
            return None
        from specconform.protocol.load import exact_int

        try:
            return exact_int(value, name)
        except UsageError as exc:
            raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None

    return click.option(name, type=str, default=None, callback=parse, help=help_text)


def _size_option(ctx, param, value):
    if value is None:
        return None
    from specconform.evidence.external import parse_size

    try:
        return parse_size(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None


def _timeout_option(ctx, param, value):
    """--adapter-timeout SECONDS: a finite number in (0, a week] (nan, inf, 0 refused)."""
    if value is None:
        return None
    from specconform.protocol.schema_base import CALL_TIMEOUT_MAX_S

    try:
        seconds = float(value)
    except ValueError:
        raise click.BadParameter(f"{value[:80]!r} is not a number of seconds") from None
    if not 0 < seconds <= CALL_TIMEOUT_MAX_S:  # False for nan too
        raise click.BadParameter(
            f"{value[:80]!r}: must be a number of seconds in (0, {CALL_TIMEOUT_MAX_S:g}]"
        )
    return seconds


def path_option(*decls: str, help: str, file: bool = False, folder: bool = False, **kw):
    """A path option, None unless given: ``file`` refuses a folder, ``folder`` a file
    (click's one-line error, exit 2); ``kw``: more of click.option's (a default, ...)."""
    kind = click.Path(dir_okay=not file, file_okay=not folder, path_type=Path)
    # No explicit default=None: click (8.3) then counts None as a given value, and a
    # required option would reach the command as None instead of exiting 2.
    return click.option(*decls, type=kind, help=help, **kw)


def run_options(f):
    options = [
        click.argument("protocol", type=click.Path(dir_okay=False, path_type=Path)),
        _int_option(
            "--seeds",
            "Seeds per group (exact integer, '5e3' accepted); only where "
            "the protocol marks it overridable.",
        ),
        _int_option("--offset", "First seed (exact integer, '2e6' accepted)."),
        _int_option("--batch-size", "Concurrent requests per engine batch."),
        click.option(
            "--mutant",
            default=None,
            help="Plant a bug (see `specconform mutants`): kernel mutants on kernel "
            "and distribution protocols, engine mutants on distribution "
            "protocols.",
        ),
        click.option(
            "--device",
            type=click.Choice(["cpu", "cuda"]),
            default=None,
            help="Override the protocol's device.",
        ),
        path_option(
            "--out",
            "out_dir",
            folder=True,
            default=DEFAULT_OUT,
            show_default=True,
            help="Output folder.",
        ),
        path_option(
            "--key",
            file=True,
            help="Ed25519 signing key (PEM); default $SPECCONFORM_SIGNING_KEY, "
            "else the user key in ~/.config/specconform (created on first use).",
        ),
        click.option("--no-sign", is_flag=True, help="Write an archive marked unsigned."),
        click.option(
            "--allow-inconclusive",
            is_flag=True,
            help="Run even when the seeds cannot give some deciding test evidence (the "
            "verdict may then be INCONCLUSIVE) or, for a protocol stating `power: {target, "
            "tv}`, the target power; without it such a run is refused before any work, "
            "naming the test, its power and the seeds it needs (exit 2).",
        ),
        path_option(
            "--ledger",
            file=True,
            help="Seed ledger (distribution, sequence, mcnemar); default OUT/seed-ledger.jsonl.",
        ),
        path_option(
            "--resume",
            folder=True,
            help="Continue an interrupted distribution run from its checkpoint folder.",
        ),
        click.option(
            "--nproc",
            type=click.IntRange(min=1),
            default=None,
            help="Shard a distribution run's seed batches over N processes on this "
            "host (launches torchrun; see docs/scaling.md). Exit 4: a process "
            "died, continue with --resume.",
        ),
        click.option(
            "--sequential",
            is_flag=True,
            help="Distribution protocols: anytime-valid mode. Run the groups batch by "
            "batch (--batch seeds each) up to the protocol's seeds (the budget); stop "
            "with FAIL at the first batch where the e-process reaches 1/alpha, PASS at "
            "the budget. The fixed-N rows become informational (docs/calibration.md).",
        ),
        _int_option(
            "--batch",
            "With --sequential: seeds per group per batch (1 .. the budget; default "
            "the budget / 20, rounded up).",
        ),
        click.option(
            "--base-ref",
            default=None,
            help="Equality protocols: compare this tree's greedy outputs with those "
            "of git commit REF (e.g. HEAD~1, main).",
        ),
        click.option(
            "--max-archive-size",
            default=None,
            callback=_size_option,
            help="Largest archive to write, e.g. 25MB or 500KiB: raw/ and plots/ files "
            "that would exceed it are hashed, listed in external/MANIFEST.json (signed) "
            "and kept beside the archive in OUT/<run-id>.external/.",
        ),
        click.option(
            "--adapter-timeout",
            default=None,
            callback=_timeout_option,
            help="Seconds any one engine adapter call may take (default: the protocol's "
            "engine.call_timeout_s, 3600). Past it the run ends with exit 124; a "
            "distribution run keeps its checkpoint for --resume.",
        ),
        click.option(
            "--verbose",
            "-v",
            is_flag=True,
            help="Also print `timing:` lines (wall times of engine builds, groups "
            "and the reference replay) on stderr.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f
