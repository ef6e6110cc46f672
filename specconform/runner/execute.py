"""Execute one protocol run end to end: collect raw data, evaluate, write the run
directory (docs/contracts.md section 3) and seal it into an evidence archive.

Nothing is left behind on failure: every input is validated first (`preflight`), the
run is written into a hidden staging folder and renamed into place only when complete.
A distribution run holds its run lock (`runner.runlock`) from before its ledger
reservation until its archive is in place.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from specconform import __version__
from specconform.evidence.external import external_dir_for
from specconform.evidence.jsonio import canonical_json_bytes
from specconform.evidence.results_io import (
    SEQUENTIAL_CSV,
    sequential_csv_bytes,
    tests_csv_bytes,
)
from specconform.kinds.registry import kind_of
from specconform.protocol.load import LoadedProtocol, canonical_json
from specconform.results import Evaluation, RawData
from specconform.results.raw import RawFile
from specconform.runner.context import RunContext, RunOptions
from specconform.runner.ledger import new_attempt_id
from specconform.runner.preflight import preflight
from specconform.runner.reserve import collect_reserved
from specconform.runner.runlock import run_lock
from specconform.util.errors import UsageError
from specconform.util.progress import timing, timing_since_start


@dataclass(frozen=True)
class RunOutcome:
    """A finished run. On a follower rank of a sharded run (`runner.sharding`) only
    `run_id` is set: its batches are in the checkpoint folder, the leader seals."""

    run_id: str
    run_dir: Path | None
    archive: Path | None
    evaluation: Evaluation | None

    @property
    def follower(self) -> bool:
        return self.evaluation is None


class RunLog:
    """Collects log lines for log.txt (and echoes nothing: the CLI prints)."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


def make_run_id(loaded: LoadedProtocol, mutant: str | None) -> str:
    """Content-addressed: protocol name, pre-registration hash and a digest of the
    effective inputs (protocol after overrides, mutant). Two runs with the same inputs
    get the same id, so their archives differ only in volatile.json (and the digests of
    it in SHA256SUMS and the attestation)."""
    import hashlib

    inputs = canonical_json({"protocol": loaded.data, "mutant": mutant})
    digest = hashlib.sha256(inputs.encode()).hexdigest()[:8]
    suffix = f"-{mutant}" if mutant else ""
    return f"{loaded.name}-{loaded.hash[:8]}-{digest}{suffix}"


def zip_beside(folder: Path) -> Path:
    """`folder` + ".zip". Never `with_suffix`: a run id such as `...-ensemble_w0.95` has
    a "suffix" (.95) that with_suffix would replace."""
    return folder.with_name(folder.name + ".zip")


def free_destination(out_dir: Path, run_id: str) -> Path:
    """OUT/<run-id>, or OUT/<run-id>-2, -3 ... when an earlier run of the same inputs is
    there: evidence is never overwritten; only the outer name differs."""
    candidate, n = out_dir / run_id, 1
    while any(p.exists() for p in (candidate, zip_beside(candidate), external_dir_for(candidate))):
        n += 1
        candidate = out_dir / f"{run_id}-{n}"
    return candidate


# Options whose values are paths chosen per run: placeholders in run.json, so identical
# inputs written to another folder give byte-identical evidence (the exact argv is in
# volatile.json).
PATH_OPTIONS = ("--out", "--ledger", "--resume", "--key", "--junit")


def portable_command(argv: list[str]) -> list[str]:
    out, skip_next = [], False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        name, eq, _ = arg.partition("=")
        if name in PATH_OPTIONS:
            out.extend([name, f"<{name[2:]}>"] if not eq else [f"{name}=<{name[2:]}>"])
            skip_next = not eq
            continue
        out.append(arg)
    return out


def _dump(obj) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


@dataclass(frozen=True)
class PreparedRun:
    """A checked run, ready to execute (made by ``runner.assemble.prepare``): nothing
    has been written yet."""

    loaded: LoadedProtocol
    out_dir: Path
    argv: tuple[str, ...]  # recorded in run.json (path options as placeholders)
    mutant: str | None
    key: Path | None
    sign: bool
    options: RunOptions = RunOptions()

    def execute(self, progress) -> RunOutcome:
        from specconform.util.extras import missing_extra

        # No torch: name the extra in one line (exit 2), whatever the entry point.
        with missing_extra(f"running protocol {self.loaded.name}"):
            return execute(self, progress)


def execute(run: PreparedRun, progress) -> RunOutcome:
    started = datetime.now(timezone.utc)
    loaded, options = run.loaded, run.options
    run_id = options.run_id or make_run_id(loaded, run.mutant)
    shard, coord = _sharding(loaded)
    run_context = RunContext(
        run_id=run_id,
        # Unique per process: two simultaneous runs of the same inputs never share one.
        attempt=options.attempt or new_attempt_id(run_id),
        out_dir=run.out_dir,
        options=options,
        coordinator=coord,
    )
    try:
        # Everything checkable is checked before any work or any file (exit 2, nothing
        # left). In a sharded run the leader checks and holds the lock; every rank
        # refuses with the leader's one line.
        error = None
        if shard.is_leader:
            try:
                preflight(
                    loaded,
                    mutant=run.mutant,
                    out_dir=run.out_dir,
                    run_id=run_id,
                    context=run_context,
                    key=run.key,
                    sign=run.sign,
                )
            except UsageError as exc:
                if not shard.distributed:
                    raise
                error = str(exc)
        error = coord.share(error)
        if error:
            raise UsageError(error)
        locked = (
            run_lock(run.out_dir, run_id)
            if kind_of(loaded.kind).capabilities.resumable and shard.is_leader
            else nullcontext()
        )
        with locked:
            return _execute_locked(run, progress, started=started, run_context=run_context)
    finally:
        coord.close()


def _sharding(loaded: LoadedProtocol):
    """This process's shard (one process unless started by torchrun) and the control
    channel to the other ranks (`runner.sharding`)."""
    from specconform.runner.sharding import Coordinator, current_shard

    shard = current_shard() if "RANK" in os.environ else None
    if shard is None or not shard.distributed:
        from specconform.runner.sharding import Shard

        return Shard(), Coordinator(Shard())
    if not kind_of(loaded.kind).capabilities.shardable:
        raise UsageError(
            f"{loaded.path}: only distribution protocols shard over "
            f"processes; run this {loaded.kind} protocol without torchrun/--nproc"
        )
    return shard, Coordinator(shard)


def _execute_locked(
    run: PreparedRun, progress, *, started: datetime, run_context: RunContext
) -> RunOutcome:
    from specconform import evidence

    loaded, mutant, argv, out_dir = run.loaded, run.mutant, run.argv, run.out_dir
    run_id = run_context.run_id
    log = RunLog()
    log(f"specconform {__version__} run {run_id}")
    log(f"protocol {loaded.path} sha256 {loaded.hash}")
    if loaded.overrides:
        log(f"overrides {json.dumps(loaded.overrides, sort_keys=True)}")
    timing_since_start("collection starts")
    raw = collect_reserved(
        loaded, mutant=mutant, progress=progress, log=log, run_context=run_context
    )
    if raw is None:  # a follower rank of a sharded run: the leader seals the archive
        return RunOutcome(run_id, None, None, None)
    t0 = time.perf_counter()  # the statistics' imports (scipy, statsmodels) count
    from specconform.kinds import reevaluate

    evaluation = reevaluate(loaded.data, RawData(raw))
    timing(f"statistics in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    finished = datetime.now(timezone.utc)
    log(f"verdict {evaluation.verdict.verdict}")

    run_json = {
        "run_id": run_id,
        "protocol_name": loaded.name,
        "protocol_hash": loaded.hash,
        "kind": loaded.kind,
        "command": portable_command(list(argv)),
        "overrides": loaded.overrides,
        "mutant": mutant,
        "device": _device(loaded),
        "specconform_version": __version__,
    }
    run_json.update(run_context.outputs.run_fields)
    files: dict[str, RawFile] = {
        "protocol.yaml": loaded.source,
        "protocol.json": (canonical_json(loaded.data) + "\n").encode(),
        "run.json": _dump(run_json),
        "results/tests.json": canonical_json_bytes([t.to_json() for t in evaluation.tests]),
        "results/tests.csv": tests_csv_bytes(evaluation.tests),
        "verdict.json": canonical_json_bytes(evaluation.verdict.to_json()),
        "environment.json": _dump(evidence.environment_manifest()),
        "volatile.json": _dump(
            {**evidence.volatile_facts(started, finished), "command": list(argv)}
        ),
        "log.txt": ("\n".join(log.lines) + "\n").encode(),
    }
    files.update(raw)
    trajectory = sequential_csv_bytes(evaluation.tests)
    if trajectory is not None:  # a sequential run: the e-process after every batch
        files[SEQUENTIAL_CSV] = trajectory
    plan = kind_of(loaded.kind).plan
    if plan is not None and trajectory is None:
        # What the run could detect (not for a sequential run: the planner sizes the
        # fixed-N tests, which there are informational; the e-process has no planner).
        files["results/plan.json"] = plan.load()(loaded, raw, evaluation)
    out_dir.mkdir(parents=True, exist_ok=True)  # only now (kernel kinds): bad input writes nothing
    final = free_destination(out_dir, run_id)
    staging = out_dir / f".partial-{final.name}"
    if staging.exists():
        shutil.rmtree(staging)
    try:
        for name, data in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, Path):  # a raw file the runner kept on disk: copied, not read
                shutil.copyfile(data, path)
            else:
                path.write_bytes(data)
        archive = evidence.seal(
            staging, key=run.key, sign=run.sign, max_size=run_context.max_archive_size
        )
        staging.rename(final)
        archive_final = zip_beside(final)
        archive.rename(archive_final)
        moved_out = external_dir_for(staging)
        if moved_out.exists():  # --max-archive-size: the files kept beside the archive
            moved_out.rename(external_dir_for(final))
        for callback in run_context.outputs.on_success:
            callback()
        timing(f"plan, files and seal in {time.perf_counter() - t0:.1f}s")
        timing_since_start("archive sealed")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        staged_zip = zip_beside(staging)
        if staged_zip.exists():
            staged_zip.unlink()
        shutil.rmtree(external_dir_for(staging), ignore_errors=True)
        raise
    return RunOutcome(run_id, final, archive_final, evaluation)


def _device(loaded: LoadedProtocol) -> str:
    model = loaded.model
    engine = getattr(model, "engine", None)
    return getattr(engine, "device", None) or getattr(model, "device", "cpu")
