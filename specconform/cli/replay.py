"""`specconform replay ARCHIVE --test NAME [--case N]`: re-run one failing case.

The minimal reproducer a developer debugs with: the archive's own protocol (protocol.json,
overrides applied), its planted bug (run.json ``mutant``), and the case's own group and
seed, run in the very batch the run ran it in (the protocol's batch plan: same batch,
same round shapes, same tokens). It prints the engine's tokens beside the reference's
law at each position (p and q of the engine's token, the reference's most likely tokens)
and exits 1 if the failure reproduces, 0 if not, 2 on bad input (one line).

Cases, numbered from 0 in the order the diagnosis lists them:
- ``out_of_support``: the observations of reference probability 0 (group order, then
  seed order); reproduced when the engine commits the same token at the same position
  and the reference gives it probability 0 again;
- ``engine_errors``: the requests that ended in an engine error; reproduced when the
  request ends in an error again.
A statistical test (χ², score, binomial) fails on counts over thousands of seeds, not on
one case: replay says so (exit 2) and points at `specconform run`.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from specconform.util.errors import EXIT_FAIL, EXIT_PASS, SpecconformError, UsageError

TOP_REFERENCE = 3  # the reference's most likely tokens shown per position


@dataclass(frozen=True)
class Case:
    group: str
    seed: int
    position: int | None  # the offending token's index (None: the whole request)
    token: int | None
    what: str  # "out of support" / "engine error"


@click.command("replay")
@click.argument("archive", type=click.Path(path_type=Path))
@click.option("--test", "test", required=True, help="The failing test's name (a table row).")
@click.option(
    "--case",
    "case_index",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which failing case of the test (0 = the first the diagnosis lists).",
)
def replay_command(archive: Path, test: str, case_index: int) -> None:
    """Re-run exactly one failing case of ARCHIVE's test NAME with the archive's own
    protocol, mutant, seed and batch; print the engine's tokens beside the reference's.

    \b
    Exit codes: 0 the failure does not reproduce; 1 it reproduces; 2 bad input (no such
    archive, test or case; a statistical test; the engine extra missing).
    """
    try:
        code = replay(archive, test, case_index, echo=click.echo)
    except SpecconformError as error:
        from specconform.cli.options import error_line

        click.echo(error_line(error), err=True)
        sys.exit(error.exit_code)
    sys.exit(code)


def replay(archive: Path, test: str, case_index: int, *, echo=print) -> int:
    """The command's work; returns its exit code (EXIT_FAIL: reproduced)."""
    from specconform.evidence.reader import read_archive

    try:
        found = archive.is_file()
    except OSError as exc:  # a name too long for the file system
        raise UsageError(f"{str(archive)[:200]}: {exc.strerror}") from None
    if not found:
        raise UsageError(f"{archive}: no such archive")
    contents = read_archive(archive)
    protocol = contents.json_object("protocol.json")
    run = contents.json_object("run.json")
    rows = {r.test: r for r in contents.evaluation().tests}
    if test not in rows:
        raise UsageError(f"--test {test}: no such test in {archive.name} ({', '.join(rows)})")
    cases = _cases(protocol, contents, test)
    if not cases:
        raise UsageError(
            f"--test {test}: no failing case to replay ({rows[test].status}; a statistical "
            "test fails on counts over many seeds: re-run the protocol with `specconform run`)"
        )
    if case_index >= len(cases):
        raise UsageError(
            f"--case {case_index}: {test} has {len(cases)} case(s), 0..{len(cases) - 1}"
        )
    case = cases[case_index]
    mutant = run.get("mutant")
    echo(
        f"replay: {test} case {case_index} of {len(cases)}: {case.what}, group {case.group} "
        f"seed {case.seed}" + (f" (mutant {mutant})" if mutant else "")
    )
    return _run_case(protocol, case, mutant, echo)


def _cases(protocol: dict, contents, test: str) -> list[Case]:
    """The test's failing cases, from the archive alone (diagnosis.support's rule)."""
    from specconform.details.distribution import EngineErrorsDetail, SupportDetail
    from specconform.diagnosis.support import first_offenders

    row = next(r for r in contents.evaluation().tests if r.test == test)
    if not isinstance(row.detail, SupportDetail | EngineErrorsDetail):
        return []
    from specconform.kinds.distribution.context import SeedView
    from specconform.stats.reference import Reference

    raw = contents.raw_data()
    ctx = SeedView.build(
        protocol, raw.csv("raw/samples.csv"), Reference(raw.json("raw/reference.json"))
    )
    if isinstance(row.detail, SupportDetail):
        offenders, total = first_offenders(ctx.data, ctx.plans, ctx.ref, limit=10**9)
        return [Case(o.group, o.seed, o.position, o.token, "out of support") for o in offenders]
    out = []
    for name, g in sorted(ctx.data.items()):
        if g.error is not None:
            out += [Case(name, int(s), None, None, "engine error") for s in g.seed[g.error]]
    return out


def _run_case(protocol: dict, case: Case, mutant: str | None, echo) -> int:
    from specconform.protocol.load import validate
    from specconform.util.extras import missing_extra

    with tempfile.TemporaryDirectory() as tmp:
        model = validate(protocol, Path(tmp) / "protocol.json")
    with missing_extra("`specconform replay`"):
        import numpy as np

        from specconform.adapters.engine import load_engine
        from specconform.runner.checkpoint import batch_plan

    group = next(g for g in model.groups if g.name == case.group)
    batch = next(
        (a, b) for name, a, b in batch_plan(model) if name == case.group and a <= case.seed < b
    )
    engine = load_engine(model.engine, mutant=mutant, log=lambda line: None)
    try:
        echo(
            f"engine: group {group.name} ({group.mode}), batch seeds {batch[0]}..{batch[1] - 1} as the run ran it"
        )
        records = engine.run_group(group, list(range(*batch)))
        record = next(r for r in records if r.seed == case.seed)
        tokens = list(record.tokens)
        echo(f"finish_reason: {record.finish_reason}")
        echo(
            f"{'pos':>3}  {'engine':>7}  {'p(engine)':>10}  {'q(engine)':>10}  reference's most likely (token:p)"
        )
        reproduced = False
        prompt = list(engine.prompt)
        for i, token in enumerate(tokens):
            p = np.asarray(engine.target_law(prompt + tokens[:i]), dtype=np.float64)
            q_law = None
            if i >= 1 and group.draft_loops is not None:
                q_law = engine.draft_law(prompt + tokens[:i], int(group.draft_loops))
            p_tok = float(p[token]) if 0 <= token < p.size else 0.0
            q_tok = "—"
            if q_law is not None:
                q = np.asarray(q_law, dtype=np.float64)
                q_tok = f"{float(q[token]) if 0 <= token < q.size else 0.0:.4g}"
            top = np.argsort(-p, kind="stable")[:TOP_REFERENCE]
            ref = ", ".join(f"{int(t)}:{p[t]:.3g}" for t in top)
            mark = "  <- out of support" if p_tok == 0.0 else ""
            echo(f"{i:>3}  {token:>7}  {p_tok:>10.4g}  {q_tok:>10}  {ref}{mark}")
            if case.position == i and token == case.token and p_tok == 0.0:
                reproduced = True
        if case.position is None:
            reproduced = record.finish_reason == "error"
    finally:
        engine.close()
    if reproduced:
        echo(f"reproduced: {case.what} (exit 1)")
        return EXIT_FAIL
    echo(f"not reproduced: the engine's tokens no longer show the {case.what} (exit 0)")
    return EXIT_PASS
