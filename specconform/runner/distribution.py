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
import sys
import time
from pathlib import Path

import pandas as pd

from specconform.errors import UsageError
from specconform.progress import timing
from specconform.runner import interrupt
from specconform.runner.ledger import LedgerEntry, check_and_reserve

SAMPLE_COLUMNS = (
    "group",
    "seed",
    "t1",
    "t2",
    "t3",
    "first_accepted",
    "drafted",
    "accepted",
    "finish_reason",
    "rounds",
)


def group_seeds(protocol, group) -> range:
    start = protocol.seeds.offset + group.seed_offset
    return range(start, start + protocol.seeds.count)


def batch_plan(protocol) -> list[tuple[str, int, int]]:
    """(group, start, stop) for every batch, in run order; fixed by the protocol."""
    size = protocol.engine.batch_size
    plan = []
    for group in protocol.groups:
        seeds = group_seeds(protocol, group)
        for s in range(seeds.start, seeds.stop, size):
            plan.append((group.name, s, min(s + size, seeds.stop)))
    return plan


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def open_checkpoint(loaded, *, mutant, context) -> Path:
    """Create (new run) or validate (--resume) the checkpoint folder; returns it."""
    model = loaded.model
    state = {
        "run_id": context.run_id,
        "attempt": context.attempt,
        "protocol_hash": loaded.hash,
        "overrides": loaded.overrides,
        "mutant": mutant,
        "plan": batch_plan(model),
    }
    resume = context.resume
    if resume is not None:
        folder = Path(resume)
        saved = read_checkpoint(folder)
        for key in ("protocol_hash", "overrides", "mutant"):
            if json.loads(json.dumps(saved[key])) != json.loads(json.dumps(state[key])):
                raise UsageError(
                    f"--resume {folder}: {key} differs from the interrupted run "
                    f"({saved[key]!r} there, {state[key]!r} now)"
                )
        if [list(x) for x in saved["plan"]] != [list(x) for x in state["plan"]]:
            raise UsageError(f"--resume {folder}: batch plan differs from the interrupted run")
        return folder
    folder = Path(context.out_dir) / f"{context.run_id}.inprogress"
    if folder.exists():
        raise UsageError(
            f"{folder}: an interrupted run with the same inputs is there; "
            f"continue it with --resume {folder} (or remove that folder)"
        )
    # Built under a temporary name and renamed: a kill at any point leaves either no
    # checkpoint folder or one with its checkpoint.json.
    building = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(building, ignore_errors=True)
    (building / "batches").mkdir(parents=True)
    _atomic_write(building / "checkpoint.json", json.dumps(state, sort_keys=True).encode())
    os.replace(building, folder)
    return folder


def _discard_checkpoint(folder: Path) -> None:
    """After the archive is in place: rename first (atomic), then delete, so a kill
    during the deletion never leaves a half-deleted folder that looks resumable."""
    done = folder.with_name(folder.name + ".done")
    os.replace(folder, done)
    shutil.rmtree(done, ignore_errors=True)


def read_checkpoint(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / "checkpoint.json").read_text())
    except FileNotFoundError:
        raise UsageError(f"--resume {folder}: no checkpoint.json (not a run in progress)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--resume {folder}: unreadable checkpoint ({exc})") from None


def _records_frame(group, records) -> pd.DataFrame:
    """One batch's sample rows, built column by column (a dict per row cost 40 ms per
    5,000 records on the 2-core CPU; the rounds' JSON is memoised per distinct pattern)."""
    tokens = [(list(r.tokens[:3]) + [-1, -1, -1])[:3] for r in records]  # -1 padded
    json_of: dict[tuple, str] = {}

    def rounds_json(rounds: tuple) -> str:
        if rounds not in json_of:
            json_of[rounds] = json.dumps([list(x) for x in rounds], separators=(",", ":"))
        return json_of[rounds]

    columns = {
        "group": [group.name] * len(records),
        "seed": [r.seed for r in records],
        "t1": [t[0] for t in tokens],
        "t2": [t[1] for t in tokens],
        "t3": [t[2] for t in tokens],
        "first_accepted": [r.first_accepted for r in records],
        "drafted": [sum(d for d, _ in r.rounds) for r in records],
        "accepted": [sum(a for _, a in r.rounds) for r in records],
        "finish_reason": [r.finish_reason for r in records],
        "rounds": [rounds_json(tuple(r.rounds)) for r in records],
    }
    return pd.DataFrame(columns, columns=list(SAMPLE_COLUMNS))


def collect(loaded, *, mutant, progress, log, context) -> dict[str, bytes] | None:
    """Generate every batch (this rank's share of them under torchrun), then, on the
    leader, replay the reference. Returns the raw files, or None on a follower rank
    (its batches are on disk; the leader seals the one archive)."""
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
    except KeyboardInterrupt:
        print(f"interrupted: continue with --resume {folder}", file=sys.stderr, flush=True)
        raise
    timing(f"batch files written in {written:.1f}s ({len(mine)} batches)")
    coord.barrier()  # every batch file is on disk
    if not shard.is_leader:
        return None
    frames = []
    for name, start, _ in plan:
        path = _batch_path(folder, name, start)
        if not path.exists():
            raise UsageError(
                f"{path}: batch missing after generation; continue the run with --resume {folder}"
            )
        frames.append(pd.read_csv(path))
    t0 = time.perf_counter()
    samples = pd.concat(frames, ignore_index=True)
    timing(f"batch files read in {time.perf_counter() - t0:.1f}s")
    log(f"generated {len(samples)} samples in {len(plan)} batches ({folder.name})")
    t0 = time.perf_counter()
    reference = replay_reference(engine, model, samples, progress)
    timing(f"reference replay in {time.perf_counter() - t0:.1f}s")
    buf = io.StringIO()
    samples.to_csv(buf, index=False, lineterminator="\n")
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
    return {
        "raw/samples.csv": buf.getvalue().encode(),
        "raw/reference.json": json.dumps(reference, sort_keys=True, separators=(",", ":")).encode(),
    }


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


def _batch_path(folder: Path, group: str, start: int) -> Path:
    return folder / "batches" / f"{group}-{start}.csv"


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


def _sparse(law) -> dict[str, float]:
    return {str(int(i)): float(law[i]) for i in law.nonzero()[0]}


def replay_reference(
    engine, model, samples: pd.DataFrame, progress, known: dict | None = None, *, t3: bool = True
) -> dict:
    """Exact laws of the serial reference (batched where the adapter offers a batched path
    that CheckedEngine holds equal to the one-prefix one): p(t1 | prompt), p(t2 | prompt,
    t1) and q_d(t2 | prompt, t1) for every observed t1 and draft depth, p(t3 | prompt,
    t1, t2) for every observed (t1, t2) (``t3=False``: not yet).

    ``known``: a reference built by an earlier call (a sequential run replays after every
    batch): only the prefixes it lacks are replayed, and it is extended in place."""
    prompt = engine.prompt
    depths = sorted({g.draft_loops for g in model.groups if g.draft_loops is not None})
    caps = engine.info.capabilities
    if not caps.draft_law:
        depths = []  # no q: the tests that need it are not applicable (capabilities say why)
    ref = known if known is not None else {}
    if not ref:
        ref.update(
            {
                "vocab_size": engine.vocab_size,
                "prompt": prompt,
                "p_t2": {},
                "p_t3": {},
                "q_t2": {str(d): {} for d in depths},
                "capabilities": caps.to_json(),
            }
        )
    t1s = sorted(
        int(t) for t in samples["t1"].unique() if t >= 0 and str(int(t)) not in ref["p_t2"]
    )
    pairs = []
    if t3 and model.engine.max_tokens >= 3:
        pairs = sorted(
            {
                (int(a), int(b))
                for a, b in zip(samples["t1"], samples["t2"], strict=False)
                if a >= 0 and b >= 0 and f"{int(a)},{int(b)}" not in ref["p_t3"]
            }
        )
    total = ("p_t1" not in ref) + len(t1s) * (1 + len(depths)) + len(pairs)
    with progress("reference", max(total, 1)) as bar:
        if "p_t1" not in ref:
            ref["p_t1"] = _sparse(engine.target_law(prompt))
            bar.advance(1)
        prefixes = [prompt + [t1] for t1 in t1s]
        laws = engine.target_laws(prefixes) if t1s else []
        for t1, law in zip(t1s, laws, strict=True):
            ref["p_t2"][str(t1)] = _sparse(law)
            bar.advance(1)
        for d in depths:
            for t1, law in zip(t1s, engine.draft_laws(prefixes, d) if t1s else [], strict=True):
                ref["q_t2"][str(d)][str(t1)] = _sparse(law)
                bar.advance(1)
        if pairs:
            laws = engine.target_laws([prompt + [t1, t2] for t1, t2 in pairs])
            for (t1, t2), law in zip(pairs, laws, strict=True):
                ref["p_t3"][f"{t1},{t2}"] = _sparse(law)
                bar.advance(1)
    return ref
