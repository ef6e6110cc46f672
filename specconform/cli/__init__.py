"""The `specconform` command line.

Exit codes (also in the README and `specconform --help`): 0 protocol passed / evidence
valid, 1 protocol failed, 2 bad input or usage, 3 evidence invalid, 7 protocol
inconclusive, 130 interrupted (Ctrl-C). Every error is one line on stderr.
"""

from __future__ import annotations

import os
import sys

import click

from specconform import __version__
from specconform.cli.options import (  # noqa: F401 (DEFAULT_OUT, run_options re-exported)
    DEFAULT_OUT,
    error_line,
    path_option,
    run_options,
)
from specconform.util.errors import (
    EXIT_INTERRUPTED,
    EXIT_PASS,
    EXIT_USAGE,
    SpecconformError,
    UsageError,
)


def _fail(exc: SpecconformError) -> None:
    from specconform.runner.sharding import current_shard, report_exit_code

    shard = current_shard() if "RANK" in os.environ else None
    if shard is None or shard.is_leader:
        click.echo(error_line(exc), err=True)  # one line, from one process
        sys.exit(report_exit_code(exc.exit_code))
    sys.exit(0 if os.environ.get("SPECCONFORM_RESULT_FILE") else exc.exit_code)


class _Group(click.Group):
    """Maps specconform errors and click usage errors onto the documented exit codes."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecconformError as exc:
            _fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specconform")
def cli():
    """Pre-registered, signed evidence that speculative decoding samples exactly.

    \b
    Exit codes:
      0    passed (or evidence valid)
      1    failed
      2    bad input or usage (one line on stderr, nothing written)
      3    evidence invalid
      4    --nproc: a process died before the verdict (continue with --resume)
      7    inconclusive: a deciding test had no evidence (too few seeds), none
           failed; `gate --inconclusive-ok` accepts it
      124  an engine adapter call passed its deadline (--adapter-timeout); a
           distribution run keeps OUT/<run-id>.inprogress for --resume
      130  interrupted (Ctrl-C); a distribution run keeps OUT/<run-id>.inprogress
           for --resume
    """


def _execute(*, no_sign: bool, verbose: bool, **options):
    """The options of `run` and `gate` as one request to the run assembly
    (`runner.assemble`, shared with the Python API): each option of `run_options` but
    --no-sign and --verbose is named after the RunRequest field it sets."""
    from specconform.runner.assemble import RunRequest, run_protocol
    from specconform.util.progress import progress, set_verbose

    set_verbose(verbose)
    request = RunRequest(
        argv=("specconform", *sys.argv[1:]), sign=not no_sign, persistent_caches=True, **options
    )
    return run_protocol(request, progress=progress, notify=lambda line: click.echo(line, err=True))


@cli.command()
@run_options
def run(nproc, **options):
    """Run a pre-registered PROTOCOL and write a signed evidence archive.

    Prints a table of every check, then `result: PASS|FAIL|INCONCLUSIVE` and `archive:
    PATH`. Exit 0 on PASS, 1 on FAIL, 7 on INCONCLUSIVE (a deciding test without
    evidence), 2 on bad input (checked before any work: one line, nothing written;
    seeds too few for a deciding test's evidence too, unless --allow-inconclusive),
    130 on Ctrl-C.
    """
    from specconform.kinds.verdict import run_outcome

    outcome = _run_and_print(nproc, options)
    verdict = outcome.evaluation.verdict.verdict
    click.echo(f"result: {verdict}")
    click.echo(f"archive: {outcome.archive}")
    _exit(run_outcome(verdict).exit_code)


def _run_and_print(nproc: int | None, options: dict):
    """What `run` and `gate` share: shard if asked, execute, let follower ranks go, print
    the table. Returns the leader's (or the only process's) RunOutcome."""
    from specconform.report.terminal import print_table

    if nproc is not None and (options.get("sequential") or _pre_registers_sequential(options)):
        raise UsageError("--sequential: batches run in one process; drop --nproc")
    _launch_shards(nproc)
    outcome = _execute(**options)
    _exit_follower(outcome)
    print_table(outcome.evaluation, archive=outcome.archive)
    return outcome


def _pre_registers_sequential(options: dict) -> bool:
    """Whether the protocol file itself says `sequential:` (checked before torchrun
    launches ranks that would each refuse it). A file that does not load is refused by
    the run itself, with its own one-line error."""
    from specconform.protocol.load import load_protocol
    from specconform.runner.assemble import pre_registers_sequential

    try:
        loaded = load_protocol(options["protocol"])
    except UsageError:  # ProtocolError too
        return False
    return pre_registers_sequential(loaded)


def _launch_shards(nproc: int | None) -> None:
    """`--nproc N`: re-run this very command under torchrun as N shards, and exit with
    the code the one-process run would have given."""
    if nproc is None:
        return
    if "RANK" in os.environ:
        raise UsageError("--nproc: already running under torchrun; drop --nproc")
    from specconform.runner.sharding import launch

    argv = sys.argv[1:]
    cut = [i for i, a in enumerate(argv) if a == "--nproc" or a.startswith("--nproc=")]
    for i in reversed(cut):
        del argv[i : i + (1 if "=" in argv[i] else 2)]
    sys.exit(launch(nproc, argv))


def _exit_follower(outcome) -> None:
    if outcome.follower:
        sys.exit(EXIT_PASS)  # the leader prints the table and carries the verdict


def _exit(code: int) -> None:
    from specconform.runner.sharding import report_exit_code

    sys.exit(report_exit_code(code))


@cli.command()
@run_options
@path_option("--junit", file=True, help="Write JUnit XML of every test here.")
@click.option(
    "--inconclusive-ok",
    is_flag=True,
    help="Accept an INCONCLUSIVE verdict (exit 0); by default it fails the gate (exit 7), "
    "unless the protocol says verdict.inconclusive: pass.",
)
def gate(nproc, junit, inconclusive_ok, **options):
    """A run meant for CI: like `run`, plus JUnit XML (--junit) and the Markdown summary
    appended to $GITHUB_STEP_SUMMARY when set. Exit 0/1/2/3/7/130 as documented; an
    INCONCLUSIVE verdict fails the gate (7) unless accepted, and one line says which."""
    from specconform.kinds.verdict import gate_outcome
    from specconform.report import junit_for_archive, step_summary_markdown

    outcome = _run_and_print(nproc, options)
    verdict = outcome.evaluation.verdict.verdict
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        tmp = junit.with_name(junit.name + ".tmp")
        tmp.write_text(junit_for_archive(outcome.archive))
        tmp.replace(junit)
        click.echo(f"junit: {junit}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(step_summary_markdown(outcome.archive))
    click.echo(f"result: {verdict}")
    click.echo(f"archive: {outcome.archive}")
    ending = gate_outcome(verdict, _protocol_data(outcome), inconclusive_ok=inconclusive_ok)
    if ending.line:
        click.echo(ending.line)
    _exit(ending.exit_code)


def _protocol_data(outcome) -> dict:
    """The run's protocol as its archive states it (overrides applied)."""
    import json

    return json.loads((outcome.run_dir / "protocol.json").read_text())


@cli.command()
def mutants():
    """List the planted bugs: name, layer, the protocol kinds it applies to, what it does
    and the real bug class. Kernel mutants live in the sampling core, which the engine's
    rounds call too, so they apply to kernel and distribution protocols; engine mutants
    only to distribution protocols."""
    from rich.console import Console
    from rich.table import Table

    from specconform.kinds.registry import kinds_with
    from specconform.util.extras import missing_extra

    with missing_extra("`specconform mutants`"):
        from engine_under_test.mutants import list_mutants

    applies = {
        layer: ", ".join(kinds_with(lambda c, layer=layer: layer in c.mutant_layers))
        for layer in ("kernel", "engine", "tree")
    }
    table = Table()
    for col in ("mutant", "layer", "protocols", "what it does", "real bug class"):
        table.add_column(col)
    for m in list_mutants():
        table.add_row(m.name, m.layer, applies.get(m.layer, "?"), m.description, m.bug_class)
    Console(width=160).print(table)


@cli.command()
def schema():
    """Print the protocol files' JSON Schema (fields marked `overridable` may be set
    from the command line)."""
    import json

    from specconform.protocol.load import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


def _register_evidence_commands() -> None:
    from specconform.cli import evidence as cli_evidence

    for name in ("verify", "report", "keygen"):
        command = getattr(cli_evidence, name, None)
        if command is not None:
            cli.add_command(command, name)


_register_evidence_commands()
from specconform.cli.plan import plan as _plan  # noqa: E402

cli.add_command(_plan, "plan")
from specconform.cli.replay import replay_command as _replay  # noqa: E402

cli.add_command(_replay, "replay")


def main() -> None:
    try:
        _main()
    except SystemExit as done:
        _leave(done.code)


def _leave(code) -> None:
    """Exit with CODE without tearing the interpreter down: once every line is out and
    every file is closed, freeing modules, tensors, CUDA Graphs and the CUDA context one
    by one only delays the exit code: fp32_t2 on the H200 exited 1.3 s after its archive
    was sealed, 0.2-0.3 s with this (docs/gpu-runs.md, session 8); 0.6 s less on the
    2-core CPU. Non-daemon threads are joined and
    atexit handlers run, as in a normal shutdown. Ranks of a
    sharded run (torchrun) exit normally: their process group shuts down in teardown;
    so does a process under a profiler or tracer (``python -m cProfile -o``, a
    debugger), which writes its output after ``main`` returns."""
    if "RANK" in os.environ or _instrumented() or not isinstance(code, int | None):
        sys.exit(code)
    import atexit
    import contextlib
    import threading

    for thread in threading.enumerate():  # what interpreter shutdown would wait for
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe (`| head`) or a closed stream: nothing more can be written.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code or 0)


def _instrumented() -> bool:
    """Whether a profiler, tracer or debugger watches this process: sys.setprofile or
    sys.settrace (Python <= 3.11's cProfile), or a sys.monitoring tool (3.12's cProfile
    registers one and leaves sys.getprofile() None)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(
        monitoring.get_tool(tool) is not None for tool in range(6)
    )


def _main() -> None:
    try:
        cli.main(prog_name="specconform", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        # One line, not click's usage block: scripts and CI logs read the first line.
        click.echo(error_line(exc.format_message()), err=True)
        sys.exit(EXIT_USAGE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        # Ctrl-C: nothing half-written is left in OUT; distribution runs keep their
        # checkpoint folder for --resume. 130 is the shell's code for SIGINT.
        click.echo("error: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except SpecconformError as exc:
        _fail(exc)
    except OSError as exc:
        # A path the file system refuses that no check named first (a name too long, a
        # device, a full disk): one line and exit 2, never a traceback (issue 37).
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(error_line(f"{where}{exc.strerror or exc}"), err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(0)
