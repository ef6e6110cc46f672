"""Distribution runner: generate every group's seeds through the engine, checkpointing
each batch, then replay the exact reference laws serially.

Resume. A run writes ``OUT/<run-id>.inprogress/``: ``checkpoint.json`` (protocol hash,
overrides, mutant, batch plan) first, then one CSV per finished batch, each written to a
temporary name and renamed, so a batch is on disk whole or not at all. ``--resume`` on
that folder skips finished batches and runs the rest with the same batch plan: after
Ctrl-C or kill -9 at any point no seed is lost and none is counted twice.
"""

from __future__ import annotations

import gc
import io
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd

from specconform.results.raw import RawFile
from specconform.runner import interrupt
from specconform.runner.checkpoint import (  # noqa: F401 (re-exported: benches, assemble)
    SAMPLE_COLUMNS,
    _atomic_write,
    _batch_path,
    _discard_checkpoint,
    _records_frame,
    batch_plan,
    group_seeds,
    open_checkpoint,
    read_checkpoint,
)
from specconform.runner.ledger import LedgerEntry, check_and_reserve
from specconform.runner.replay import _sparse, replay_reference  # noqa: F401 (re-exported)
from specconform.util.errors import AdapterTimeout, UsageError
from specconform.util.progress import notice, timing


def collect(loaded, *, mutant, progress, log, context) -> dict[str, RawFile] | None:
    """Generate every batch (this rank's share of them under torchrun), then, on the
    leader, replay the reference. Returns the raw files (raw/samples.csv as the path of
    the joined file in the checkpoint folder), or None on a follower rank (its batches
    are on disk; the leader seals the one archive)."""
    from specconform.adapters.engine import AdapterError
    from specconform.runner import sharding

    interrupt.check_environment()
    model = loaded.model
    coord = context.coordinator or sharding.Coordinator(sharding.Shard())
    shard = coord.shard
    if model.sequential is not None and shard.distributed:
        raise UsageError(f"{loaded.path}: a sequential run runs in one process, not sharded")
    # Every rank builds its engine (and validates the adapter's describe() and the
    # groups) before the leader writes anything: a broken adapter, or a rank without
    # the protocol's device, refuses at start and leaves nothing in --out.
    sharding.select_device(shard, model.engine.device)
    t0 = time.perf_counter()
    engine, error = _load_engine(model, mutant=mutant, log=log)
    timing(f"engine adapter loaded in {time.perf_counter() - t0:.1f}s (imports, model)")
    coord.agree(error)
    folder = None
    undo = _Undo(Path(context.out_dir), context.ledger_path, fresh=context.resume is None)
    # Everything alive now (modules, the model, the engine) lives for the whole run:
    # freezing it keeps the engine's own gc.collect() calls (before a CUDA Graph
    # capture, when an engine is freed) from rescanning torch's object graph each time
    # (0.18 s a call on the GPU machine, 17 calls in a fp32_t2 run). Undone below.
    gc.freeze()
    try:
        if shard.is_leader:
            log(
                f"engine adapter: {engine.name} ({engine.info.name} {engine.info.version}, "
                f"source sha256 {engine.info.source_sha256[:16]})"
            )
            folder, error = _open_run(loaded, model, mutant=mutant, context=context)
        folder, error = coord.share((str(folder) if folder else None, error))
        if error:
            raise UsageError(error)
        folder = Path(folder)
        if model.sequential is not None:  # batch by batch until the e-process decides
            from specconform.runner.sequential import collect_sequential

            return collect_sequential(
                loaded, model, engine, folder, progress=progress, log=log, context=context
            )
        return _collect(
            loaded, model, shard, coord, engine, folder, progress=progress, log=log, context=context
        )
    except AdapterError:
        # A broken adapter yields no evidence: its checkpoint and seed reservation go too.
        if shard.is_leader and folder is not None:
            undo(Path(folder))
        raise
    finally:
        engine.close()
        gc.unfreeze()  # a process that runs again (the API, tests) collects as before


def _load_engine(model, *, mutant, log):
    """(engine, None), or (None, the one-line refusal) for `coord.agree`."""
    from specconform.adapters.engine import load_engine

    try:
        engine = load_engine(model.engine, mutant=mutant, log=log)
        engine.check_groups(model.groups)
    except UsageError as exc:  # AdapterError included
        return None, str(exc)
    return engine, None


def _collect(loaded, model, shard, coord, engine, folder, *, progress, log, context):
    groups = {g.name: g for g in model.groups}
    plan = batch_plan(model)
    mine = [b for i, b in enumerate(plan) if shard.owns(i)]
    written = 0.0  # s spent turning records into batch files (timing line)
    try:
        with progress("generate", sum(b - a for _, a, b in mine)) as bar:
            for name, start, stop in mine:
                path = _batch_path(folder, name, start)
                if not path.exists():
                    records = engine.run_group(groups[name], list(range(start, stop)))
                    t0 = time.perf_counter()
                    buf = io.StringIO()
                    _records_frame(groups[name], records).to_csv(
                        buf, index=False, lineterminator="\n"
                    )
                    _atomic_write(path, buf.getvalue().encode())
                    written += time.perf_counter() - t0
                    interrupt.batch_written()
                bar.advance(stop - start)
    except (KeyboardInterrupt, AdapterTimeout):  # a hung adapter's call was interrupted
        notice(f"interrupted: continue with --resume {folder}")
        raise
    timing(f"batch files written in {written:.1f}s ({len(mine)} batches)")
    coord.barrier()  # every batch file is on disk
    if not shard.is_leader:
        return None
    t0 = time.perf_counter()
    samples, observed, count = _join_batches(folder, plan)
    timing(f"batch files read in {time.perf_counter() - t0:.1f}s")
    log(f"generated {count} samples in {len(plan)} batches ({folder.name})")
    t0 = time.perf_counter()
    reference = replay_reference(engine, model, observed, progress)
    timing(f"reference replay in {time.perf_counter() - t0:.1f}s")
    context.outputs.on_success.append(lambda: _discard_checkpoint(folder))
    context.outputs.run_fields.update(
        {
            "seed_ranges": {
                g.name: [group_seeds(model, g).start, group_seeds(model, g).stop]
                for g in model.groups
            },
            "engine_adapter": engine.info.to_json(),
        }
    )
    # samples.csv stays on disk (the checkpoint's joined file): the evaluator streams it
    # and the archive writer copies it, neither holds it whole (issue 38).
    return {
        "raw/samples.csv": samples,
        "raw/reference.json": json.dumps(reference, sort_keys=True, separators=(",", ":")).encode(),
    }


JOINED = "samples.csv"  # the batches joined, in the checkpoint folder


def _join_batches(folder: Path, plan) -> tuple[Path, pd.DataFrame, int]:
    """(raw/samples.csv on disk, the distinct observed (group, t1, t2, t3) rows, the
    number of samples), one batch file at a time in plan order.

    samples.csv is the batch files' bytes under one header: what parsing every batch,
    concatenating the frames and writing them again gave, byte for byte (the batches are
    that writer's own output). It is written batch by batch to ``folder/samples.csv``
    (a temporary name, renamed when whole), so the run holds one batch at a time, never
    the whole table (issue 38: host memory flat in the seed count). The replay needs
    only which (t1, t2) occurred and which t3 each group drew after them, so the frame
    it gets holds each such row once (deduplicated after every batch: it grows with the
    distinct rows, not with the seeds)."""
    out = folder / JOINED
    tmp = out.with_name(out.name + ".tmp")
    try:
        observed, count = _join_into(folder, plan, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return out, observed, count


def _join_into(folder: Path, plan, tmp: Path) -> tuple[pd.DataFrame, int]:
    observed = pd.DataFrame(columns=["group", "t1", "t2", "t3"])
    header, count = None, 0
    with open(tmp, "wb") as fh:
        for name, start, _ in plan:
            path = _batch_path(folder, name, start)
            if not path.exists():
                raise UsageError(
                    f"{path}: batch missing after generation; continue the run with "
                    f"--resume {folder}"
                )
            data = path.read_bytes()
            head, _, rows = data.partition(b"\n")
            if header is None:
                header = head
                fh.write(head + b"\n")
            elif head != header:
                raise UsageError(f"{path}: its columns differ from the run's first batch")
            fh.write(rows)
            # (group, t1, t2, t3): the replay needs which (t1, t2) occurred, and which t3
            # of which group, to record q of an out-of-support t3 (issue 36); each once,
            # in order of first occurrence (as deduplicating the whole run would give).
            frame = pd.read_csv(io.BytesIO(data), usecols=["group", "t1", "t2", "t3"])
            count += len(frame)
            parts = [observed, frame.drop_duplicates()] if len(observed) else [frame]
            observed = pd.concat(parts, ignore_index=True).drop_duplicates(ignore_index=True)
            del data, rows, frame
    return observed, count


class _Undo:
    """Remembers what --out held before a fresh run, to restore it if the adapter breaks."""

    def __init__(self, out_dir: Path, ledger: Path, *, fresh: bool):
        self.out_dir, self.ledger, self.fresh = out_dir, ledger, fresh
        self.out_existed = out_dir.exists()
        self.ledger_size = ledger.stat().st_size if ledger.exists() else None

    def __call__(self, folder: Path) -> None:
        if not self.fresh:
            return  # a resumed run keeps its checkpoint: the finished batches are valid
        shutil.rmtree(folder, ignore_errors=True)
        if self.ledger_size is None:
            self.ledger.unlink(missing_ok=True)
            # The ledger's lock file is kept by design while a ledger exists (ledger.py);
            # this run created both, and the ledger is gone again.
            self.ledger.with_name(self.ledger.name + ".lock").unlink(missing_ok=True)
        elif self.ledger.exists():
            with open(self.ledger, "r+b") as fh:
                fh.truncate(self.ledger_size)
        # A cache folder this run started goes with the CLI's persistent_caches
        # (runner/caches.py), which sees the failure after this re-raises.
        if not self.out_existed and self.out_dir.exists() and not any(self.out_dir.iterdir()):
            self.out_dir.rmdir()


def _open_run(loaded, model, *, mutant, context) -> tuple[Path | None, str | None]:
    """Leader only: the seed ledger entries of the whole run (every group's full range,
    whatever the number of processes), then the checkpoint folder. Returns (folder,
    None), or (None, the one-line refusal) so that every rank can refuse with it."""
    try:
        # Reserve first: a refused reservation must leave no .inprogress folder behind.
        # (A sequential run reserves its whole budget: seeds it did not need stay used.)
        check_and_reserve(
            context.ledger_path,
            [
                LedgerEntry(
                    loaded.name,
                    loaded.hash,
                    context.attempt,
                    g.name,
                    group_seeds(model, g).start,
                    group_seeds(model, g).stop,
                    mutant,
                )
                for g in model.groups
            ],
            expansion=model.expansion,
            offset=model.seeds.offset,
        )
        folder = open_checkpoint(loaded, mutant=mutant, context=context)
    except UsageError as exc:
        return None, str(exc)
    return folder, None
