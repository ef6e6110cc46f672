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

from specconform.errors import UsageError


def replay_laws(loaded) -> dict:
    """reference.json-shaped laws of every possible t1 by serial replay through the
    protocol's own engine adapter (bundled, hf or a user's): its p and, when it gives
    one, its q."""
    try:
        import torch
    except ImportError:
        raise UsageError("no torch here: pass --reference ARCHIVE or reference.json") from None
    from specconform.adapters.engine import load_engine

    spec = loaded.model.engine
    if spec.device == "cuda" and not torch.cuda.is_available():
        spec = spec.model_copy(update={"device": "cpu"})
        click.echo("plan: no CUDA device, replaying the reference laws on CPU", err=True)
    engine = load_engine(spec, mutant=None, log=lambda line: None)
    prompt = engine.prompt
    depths = sorted({g.draft_loops for g in loaded.model.groups if g.draft_loops})

    def sparse(law):
        return {str(int(i)): float(law[i]) for i in law.nonzero()[0]}

    ref = {
        "vocab_size": engine.vocab_size,
        "p_t1": sparse(engine.target_law(prompt)),
        "p_t2": {},
        "q_t2": {str(d): {} for d in depths},
        "p_t3": {},
    }
    for t1 in sorted(int(t) for t in ref["p_t1"]):
        ref["p_t2"][str(t1)] = sparse(engine.target_law(prompt + [t1]))
        for d in depths:
            q = engine.draft_law(prompt + [t1], d)  # None: the adapter gives no q
            if q is not None:
                ref["q_t2"][str(d)][str(t1)] = sparse(q)
    engine.close()
    return ref


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
    from specconform.plan import plan_tests, planning_level, seeds_needed
    from specconform.protocol.load import load_protocol

    if seeds is not None and tv is not None:
        raise UsageError("give --seeds or --tv, not both")
    if seeds is not None and seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {seeds}")
    if not 0 < power < 1:
        raise UsageError(f"--power must lie in (0, 1), got {power}")
    loaded = load_protocol(protocol)
    data = loaded.data
    if data["kind"] != "distribution":
        raise UsageError(f"{protocol}: plan covers distribution protocols, not {data['kind']}")
    try:
        ref = load_reference(reference) if reference else replay_laws(loaded)
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
