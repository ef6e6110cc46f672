"""A distribution run's batches and checkpoint folder, shared by the fixed-N runner
(`runner.distribution`) and the sequential one (`runner.sequential`).

``OUT/<run-id>.inprogress/`` holds ``checkpoint.json`` (protocol hash, overrides,
mutant, batch plan) and one CSV per finished batch, each written to a temporary name and
renamed, so a batch is on disk whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd

from specconform.util.errors import UsageError

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

    return sample_frame(
        group=[group.name] * len(records),
        seed=[r.seed for r in records],
        tokens=([t[0] for t in tokens], [t[1] for t in tokens], [t[2] for t in tokens]),
        first_accepted=[r.first_accepted for r in records],
        drafted=[sum(d for d, _ in r.rounds) for r in records],
        accepted=[sum(a for _, a in r.rounds) for r in records],
        finish_reason=[r.finish_reason for r in records],
        rounds=[rounds_json(tuple(r.rounds)) for r in records],
    )


def sample_frame(
    *, group, seed, tokens, first_accepted, drafted, accepted, finish_reason, rounds
) -> pd.DataFrame:
    """A batch's rows of raw/samples.csv in SAMPLE_COLUMNS order, from its columns (each a
    sequence of the batch's length, or a scalar broadcast; ``tokens`` is (t1, t2, t3),
    -1 where absent). The runner's batches and the synthetic ones of bench/rss_scaling.py
    and the streaming tests are built here, so they cannot drift from the format."""
    t1, t2, t3 = tokens
    columns = {
        "group": group,
        "seed": seed,
        "t1": t1,
        "t2": t2,
        "t3": t3,
        "first_accepted": first_accepted,
        "drafted": drafted,
        "accepted": accepted,
        "finish_reason": finish_reason,
        "rounds": rounds,
    }
    return pd.DataFrame(columns, columns=list(SAMPLE_COLUMNS))


def _batch_path(folder: Path, group: str, start: int) -> Path:
    return folder / "batches" / f"{group}-{start}.csv"
