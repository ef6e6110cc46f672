"""Sequential (anytime-valid) distribution run: `specconform run --sequential --batch N`.

The protocol's ``seeds.count`` per group is the budget. The groups run batch by batch:
batch k is seeds k·N .. (k+1)·N − 1 of *every* group's range (groups of a seed-sharing
family on the same seed indices, so the e-process can average them index by index).
After each batch the reference laws of the newly observed prefixes are replayed (the
same serial replay as a fixed-N run, `distribution.replay_reference`, extended in place)
and the e-process is recomputed on everything so far
(`kinds.distribution.sequential.sequential_outcome`, the rule `verify` re-checks). The
run stops at the first batch in which max E reached 1/alpha (FAIL) or at the budget
(PASS). Ville's inequality bounds P(sup_n E_n >= 1/alpha) over every n, so stopping at
batch ends keeps the false-fail rate <= alpha.

The whole budget is reserved in the seed ledger up front (seeds a run did not need stay
used: a later run cannot pick the stopping point by re-running them). A sequential run
does not resume (`--resume` is refused); Ctrl-C leaves its batches in
OUT/<run-id>.inprogress for inspection.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from specconform.kinds.distribution.sequential import sequential_alpha, sequential_outcome
from specconform.runner import interrupt
from specconform.runner.checkpoint import (
    _atomic_write,
    _batch_path,
    _discard_checkpoint,
    _records_frame,
    group_seeds,
)
from specconform.runner.replay import replay_reference
from specconform.stats.eprocess import batch_ends
from specconform.stats.reference import Reference
from specconform.util.progress import notice, silent


def collect_sequential(loaded, model, engine, folder: Path, *, progress, log, context) -> dict:
    """Run batches until the e-process decides; returns the raw files (samples.csv of the
    seeds that ran, reference.json of their prefixes)."""
    from specconform.adapters.engine import AdapterError

    protocol = loaded.data
    budget, batch = model.seeds.count, model.sequential.batch
    if not engine.info.capabilities.draft_law and any(
        g.draft_loops is not None for g in model.groups
    ):
        # Raised before any batch: collect() undoes the checkpoint and the reservation.
        raise AdapterError(
            f"{loaded.path}: --sequential needs the draft law q of the speculative groups "
            f"(the e-process scores the joint accept/reject cells); adapter {engine.name} "
            "gives none"
        )
    alpha = sequential_alpha(protocol)
    ends = batch_ends(budget, batch)
    log(f"sequential: budget {budget} seeds per group, batches of {batch}, alpha {alpha:g}")
    frames: list[pd.DataFrame] = []
    reference: dict = {}
    start = 0
    stop = None
    try:
        with _batch_bar(progress, len(ends), budget, alpha) as show:
            for k, end in enumerate(ends):
                for group in model.groups:
                    frames.append(_run_batch(engine, model, group, folder, start, end))
                samples = pd.concat(frames, ignore_index=True)
                replay_reference(engine, model, samples, silent, reference, t3=False)
                stop = sequential_outcome(protocol, samples, Reference(reference))
                point = stop.trajectory[-1]
                show(k + 1, end, point.log_e, point.sup_log_e)
                log(
                    f"sequential batch {k + 1}/{len(ends)}: {end}/{budget} seeds per group, "
                    f"log E {point.log_e:.6g}, max log E {point.sup_log_e:.6g}"
                )
                start = end
                if stop.crossed:
                    break
    except KeyboardInterrupt:
        notice(f"interrupted: a sequential run does not resume; its batches are in {folder}")
        raise
    assert stop is not None  # batch_ends is never empty
    verdict = "FAIL" if stop.crossed else "PASS"
    log(f"sequential stop: {verdict} after {stop.seeds} of {budget} seeds per group")
    replay_reference(engine, model, samples, progress, reference, t3=True)
    buf = io.StringIO()
    samples.to_csv(buf, index=False, lineterminator="\n")
    context.outputs.on_success.append(lambda: _discard_checkpoint(folder))
    context.outputs.run_fields.update(
        {
            "seed_ranges": {
                g.name: [group_seeds(model, g).start, group_seeds(model, g).start + stop.seeds]
                for g in model.groups
            },
            "engine_adapter": engine.info.to_json(),
            "sequential": {
                "batch": batch,
                "budget": budget,
                "alpha": alpha,
                "seeds_used": stop.seeds,
                "batches_run": len(stop.trajectory),
                "verdict": verdict,
            },
        }
    )
    return {
        "raw/samples.csv": buf.getvalue().encode(),
        "raw/reference.json": _reference_bytes(reference),
    }


def _run_batch(engine, model, group, folder: Path, start: int, end: int) -> pd.DataFrame:
    """Seed indices [start, end) of one group, in engine batches of engine.batch_size;
    each written whole (temporary name, then renamed) to the run's batches/ folder."""
    first = group_seeds(model, group).start
    size = model.engine.batch_size
    parts = []
    for lo in range(first + start, first + end, size):
        seeds = list(range(lo, min(lo + size, first + end)))
        frame = _records_frame(group, engine.run_group(group, seeds))
        buf = io.StringIO()
        frame.to_csv(buf, index=False, lineterminator="\n")
        _atomic_write(_batch_path(folder, group.name, lo), buf.getvalue().encode())
        interrupt.batch_written()
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


def _reference_bytes(reference: dict) -> bytes:
    import json

    return json.dumps(reference, sort_keys=True, separators=(",", ":")).encode()


@contextmanager
def _batch_bar(progress, batches: int, budget: int, alpha: float):
    """Yields show(batch, seeds, log_e, sup_log_e). On a terminal (the CLI's progress): a
    rich bar over batches with seeds so far and the current E against 1/alpha; otherwise
    the given ``progress`` over batches (plain lines in CI, nothing when silent)."""
    from specconform.util import progress as progress_module

    if progress is not progress_module.progress or not progress_module.interactive():
        with progress("sequential batches", batches) as bar:
            yield lambda *_: bar.advance(1)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("sequential"),
        BarColumn(bar_width=20),
        TextColumn("batch {task.completed}/{task.total}"),
        TextColumn("seeds {task.fields[seeds]}/" + f"{budget}"),
        TextColumn("E {task.fields[e]} (max {task.fields[sup]}, FAIL at " + f"{1 / alpha:g})"),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task("sequential", total=batches, seeds=0, e="1", sup="1")

        def show(done: int, seeds: int, log_e: float, sup_log_e: float) -> None:
            bar.update(task, completed=done, seeds=seeds, e=_e(log_e), sup=_e(sup_log_e))

        yield show


def _e(log_e: float) -> str:
    import math

    if log_e == math.inf:
        return "inf"
    return f"{math.exp(log_e):.3g}" if log_e < 700 else f"e^{log_e:.0f}"
