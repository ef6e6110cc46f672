"""`specconform plan PROTOCOL [--seeds N | --tv X]`: the detectable TV of every test at N
seeds per group, or the seeds each needs for a TV x (power 0.99; specconform.plan).

Exact laws come from ``--reference`` (a reference.json or an evidence archive: no torch)
or, without it, from a serial replay of p_t1, p_t2 and q_t2 through the protocol's engine
on CPU (torch needed; the t3 laws are not replayed, so t3 is not planned).
Exit codes: 0 done, 2 bad input (one line on stderr, nothing on stdout).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from specconform.util.errors import UsageError


def _fmt_tv(x: float) -> str:
    return "no evidence" if math.isinf(x) else f"{x:.4f}"


def _fmt_n(lo: float, hi: float) -> str:
    return "—" if hi == 0 else (f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}–{hi:,.0f}")


@click.command("plan")
@click.argument("protocol", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--seeds",
    type=int,
    default=None,
    help="Seeds per group (default: the protocol's seeds.count): print the TV each test detects.",
)
@click.option(
    "--tv",
    type=float,
    default=None,
    help="Print the seeds per group each test needs to detect this TV.",
)
@click.option(
    "--reference",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="reference.json or evidence archive (.zip) with the exact laws.",
)
@click.option("--power", type=float, default=0.99, show_default=True)
def plan(protocol, seeds, tv, reference, power):
    """Sample-size plan of a distribution protocol (noncentral chi2, power 0.99)."""
    from specconform.calibration import load_reference
    from specconform.kinds.registry import kind_of
    from specconform.planning import plan_tests, planning_level, seeds_needed
    from specconform.protocol.load import load_protocol
    from specconform.protocol.schema_base import COUNT_MAX
    from specconform.runner.replay import replay_laws

    if seeds is not None and tv is not None:
        raise UsageError("give --seeds or --tv, not both")
    if seeds is not None and not 1 <= seeds <= COUNT_MAX:  # before minutes of replay
        got = seeds if abs(seeds) < 10**20 else "more"
        raise UsageError(f"--seeds must lie in [1, {COUNT_MAX:,}], got {got}")
    if tv is not None and not 0 < tv <= 1:  # nan and inf too
        raise UsageError(f"--tv must lie in (0, 1], got {tv}")
    if not 0 < power < 1:
        raise UsageError(f"--power must lie in (0, 1), got {power}")
    loaded = load_protocol(protocol)
    data = loaded.data
    if not kind_of(loaded.kind).capabilities.plan_command:
        raise UsageError(f"{protocol}: plan covers distribution protocols, not {data['kind']}")
    try:
        ref = (
            load_reference(reference)
            if reference
            else replay_laws(loaded, notify=lambda line: click.echo(line, err=True))
        )
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"--reference {reference}: {exc}") from None
    _, how = planning_level(data)
    if tv is not None:
        try:
            rows = seeds_needed(data, ref, tv, power)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        lines = [
            f"# {data['name']}: seeds per group to detect TV {tv:g} per deciding "
            f"stratum at power {power:g}; {how}",
            "| test | role | deciding | df | strata | n per stratum | seeds needed |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in rows:
            p = r.plan
            cells = (
                ("—", "—", "—")
                if p is None
                else (str(p.df), str(len(p.strata)), _fmt_n(*p.n_per_stratum))
            )
            need = "not reachable" if math.isinf(r.seeds) else f"{int(r.seeds):,}"
            lines.append(
                f"| {r.test} | {r.role} | {'yes' if r.deciding else ''} | "
                + " | ".join(cells)
                + f" | {need} |"
            )
    else:
        n = seeds or int(data["seeds"]["count"])
        try:
            rows = plan_tests(data, ref, n, power)
        except ValueError as exc:  # e.g. a reference without the laws of every t1
            raise UsageError(str(exc)) from None
        lines = [
            f"# {data['name']}: TV detectable per deciding stratum at {n:,} seeds per "
            f"group, power {power:g}; {how}",
            "| test | role | deciding | level | df | strata | n per stratum | "
            "detectable TV | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for p in rows:
            lines.append(
                f"| {p.test} | {p.role} | {'yes' if p.deciding else ''} | "
                f"{p.level:.3g} | {p.df} | {len(p.strata)} | "
                f"{_fmt_n(*p.n_per_stratum)} | {_fmt_tv(p.detectable_tv)} | "
                f"{p.note} |"
            )
    lines.append(
        "TV: least favourable bias on the test's final cells (chi2 >= 4 TV^2), "
        "every deciding stratum; acceptance: rate shift. Strata: expected size >= "
        "min_samples. Asymptotic noncentral chi2."
    )
    sys.stdout.write("\n".join(lines) + "\n")
