"""What one run knows about itself, as typed objects instead of a shared dict.

Vocabulary:
- ``RunOptions``: what the caller (CLI, API, a bench) asks of a run beside the protocol,
  the mutant and the key: the seed ledger's path, the checkpoint to resume, the archive
  size cap; a resumed run also brings back its run id and ledger attempt id.
- ``RunContext``: the frozen facts of the run once `runner.execute` has fixed them: run
  id, ledger attempt id (unique per process), output folder, the options, and the
  control channel of a sharded run. Runners and preflight read it; nobody changes it.
- ``RunOutputs``: the one mutable part, carried by the context: what a kind's runner
  hands back to `execute` beside its raw files -- fields for run.json, callbacks to run
  once the archive is sealed (discarding a checkpoint), and the seed reservation hook a
  sequence run calls once its inputs are checked (`runner.reserve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEDGER_NAME = "seed-ledger.jsonl"  # the default ledger, inside --out


@dataclass(frozen=True)
class RunOptions:
    ledger: Path | None = None  # None: OUT/seed-ledger.jsonl
    resume: Path | None = None  # an OUT/<run-id>.inprogress checkpoint (distribution)
    max_archive_size: int | None = None  # bytes; None: the evidence layer's default
    run_id: str | None = None  # a resumed run keeps its id ...
    attempt: str | None = None  # ... and its ledger attempt id


class RunOutputs:
    """Collected by the runner during the run, read by `execute` afterwards."""

    def __init__(self) -> None:
        self.run_fields: dict[str, Any] = {}  # merged into run.json
        self.on_success: list[Callable[[], None]] = []  # after the archive is sealed
        self.reserve_seeds: Callable[[], None] | None = None  # see runner.reserve

    def add_run_fields(self, **fields: Any) -> None:
        self.run_fields.update(fields)


@dataclass(frozen=True)
class RunContext:
    run_id: str
    attempt: str
    out_dir: Path
    options: RunOptions = RunOptions()
    coordinator: Any = None  # runner.sharding.Coordinator (None: one process)
    outputs: RunOutputs = field(default_factory=RunOutputs, compare=False)

    @property
    def resume(self) -> Path | None:
        return self.options.resume

    @property
    def ledger_path(self) -> Path:
        return Path(self.options.ledger or Path(self.out_dir) / LEDGER_NAME)

    @property
    def max_archive_size(self) -> int | None:
        return self.options.max_archive_size

    @classmethod
    def standalone(cls, out_dir: Path | str = ".") -> RunContext:
        """A context for calling a kind's ``collect`` outside `execute` (tests, benches):
        fixed ids, no ledger in use unless the runner reserves through one."""
        return cls(run_id="standalone", attempt="standalone", out_dir=Path(out_dir))
