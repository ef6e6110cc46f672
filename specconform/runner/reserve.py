"""Collection under the seed ledger: the raw data of a run, with its seeds reserved.

A distribution run reserves its seeds when it opens its checkpoint folder
(`runner.distribution`) and keeps them through an interruption, for `--resume`; refused
before that folder exists (a lost reservation race, say), it gives them back here. A
sequence or McNemar run has no checkpoint: its seeds are reserved once its engine is
built and its inputs checked, atomically (of two runs at once, one is refused naming the other), and
given back when collection ends without raw data (an error, Ctrl-C) -- a run that recorded nothing is no evidence, so its seeds
may be drawn again. Equality, performance and the kernel kinds draw no seeds from a
seed plan and are not ledgered.
"""

from __future__ import annotations

from pathlib import Path

from specconform.kinds.registry import kind_of
from specconform.runner.collect import collect_raw
from specconform.runner.context import RunContext
from specconform.runner.ledger import check_and_reserve, release
from specconform.runner.preflight import ledger_entries
from specconform.util.errors import UsageError


def collect_reserved(
    loaded, *, mutant, progress, log, run_context: RunContext
) -> dict[str, bytes] | None:
    """collect_raw with the run's seed reservation handled for its kind: kinds without a
    checkpoint reserve through the runner's hook (``reserves_in_runner``); a resumable
    kind reserves when it opens its checkpoint and gives the seeds back here if refused
    before that folder exists."""
    capabilities = kind_of(loaded.kind).capabilities
    if capabilities.reserves_in_runner:
        return _collect_hooked(
            loaded, mutant=mutant, progress=progress, log=log, run_context=run_context
        )
    try:
        return collect_raw(
            loaded, mutant=mutant, progress=progress, log=log, run_context=run_context
        )
    except UsageError:
        out_dir = Path(run_context.out_dir)
        coord = run_context.coordinator
        leader = coord is None or coord.shard.is_leader
        if (
            leader
            and capabilities.resumable
            and run_context.resume is None
            and not (out_dir / f"{run_context.run_id}.inprogress").exists()
        ):
            release(run_context.ledger_path, run_context.attempt)
        raise


def _collect_hooked(loaded, *, mutant, progress, log, run_context: RunContext):
    """The sequence and McNemar runners reserve through
    ``run_context.outputs.reserve_seeds`` once the engine is built and the inputs are
    checked (`runner.sequence`, `runner.mcnemar`), so that bad input found there still
    leaves nothing behind, not even a ledger."""
    path = run_context.ledger_path
    attempt = run_context.attempt
    reserved: list[bool] = []

    def reserve_seeds() -> None:
        check_and_reserve(
            path,
            ledger_entries(loaded, attempt, mutant),
            offset=loaded.model.seeds.offset,
            resumable=False,
        )
        reserved.append(True)

    run_context.outputs.reserve_seeds = reserve_seeds
    try:
        raw = collect_raw(
            loaded, mutant=mutant, progress=progress, log=log, run_context=run_context
        )
    except BaseException:
        if reserved:
            release(path, attempt)
        raise
    finally:
        run_context.outputs.reserve_seeds = None
    if not reserved:  # a runner that skipped the reservation must not pass unledgered
        raise RuntimeError(f"the {loaded.kind} runner collected without reserving its seeds")
    return raw
