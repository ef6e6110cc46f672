"""The seed ledger: which seed ranges earlier runs of a protocol used.

A JSON-lines file; one entry per (run, group): protocol name and hash, attempt id (the
`run_id` field), group, seed range [start, stop), whether the run carried a mutant. A
new clean run whose range for a group overlaps an earlier clean run of the same protocol
name is refused, naming that run, unless the protocol declares itself an expansion of
exactly that range (same start, a superset). Mutant runs (negative controls) are
recorded but neither blocked nor blocking: they are not evidence for the protocol.

The ledger is a lock. `check_and_reserve` takes an exclusive `fcntl.flock` on
`<ledger>.lock` (beside the ledger), re-reads the ledger under it, checks and appends,
then releases: of several processes reserving overlapping seeds at once, exactly one
succeeds and the others are refused naming it. Attempt ids are unique per process
(`new_attempt_id`: run id, host, pid and a random token), so two simultaneous runs of
the same inputs never mistake each other for themselves; a resumed run keeps its
attempt id (from its checkpoint) and so never conflicts with its own entries.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict, Unpack  # Unpack: Python 3.11; pydantic brings it

from specconform.runner import interrupt
from specconform.util.errors import UsageError


@dataclass(frozen=True)
class LedgerEntry:
    protocol_name: str
    protocol_hash: str
    run_id: str  # the attempt id: "<run-id>@<host>:<pid>:<token>" (older ledgers: any text)
    group: str
    start: int
    stop: int
    mutant: str | None


def new_attempt_id(run_id: str) -> str:
    """A ledger id no other process can produce: run id, host, pid, 32 random bits."""
    return f"{run_id}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def attempt_owner(attempt: str) -> tuple[str, int] | None:
    """(host, pid) of an attempt id made by `new_attempt_id`; None for other ids."""
    _, sep, tail = attempt.rpartition("@")
    host, _, rest = tail.partition(":")
    pid, _, _token = rest.partition(":")
    if not sep or not host or not pid.isdigit():
        return None
    return host, int(pid)


def pid_alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` lives: True/False on this host, None (unknown) elsewhere."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def describe_attempt(attempt: str, folder: Path | None = None) -> str:
    """'earlier run X (live: pid P on host H)', '(finished: archive A)', '(interrupted:
    continue it with --resume F)' ... for refusals; `folder` is where its files would
    be (the ledger's folder, by default OUT)."""
    owner = attempt_owner(attempt)
    run_id = attempt.rpartition("@")[0] if owner else attempt
    if owner is not None and pid_alive(*owner):
        return f"earlier run {run_id} (live: pid {owner[1]} on host {owner[0]})"
    if folder is not None:
        if (folder / f"{run_id}.inprogress").is_dir():
            return (
                f"earlier run {run_id} (interrupted: continue it with --resume "
                f"{folder / (run_id + '.inprogress')})"
            )
        if (folder / f"{run_id}.zip").is_file():
            return f"earlier run {run_id} (finished: {folder / (run_id + '.zip')})"
    if owner is None:
        return f"earlier run {run_id}"
    if pid_alive(*owner) is None:
        return f"earlier run {run_id} (pid {owner[1]} on host {owner[0]}, another host)"
    return f"earlier run {run_id} (finished or interrupted)"


def read_ledger(path: Path) -> list[LedgerEntry]:
    if not path.exists():
        return []
    entries = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the seed ledger ({exc})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(LedgerEntry(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise UsageError(f"{path}: line {number} is not a ledger entry ({exc})") from None
    return entries


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold flock on <ledger>.lock. The lock file is never deleted: unlinking a lock
    file others may be waiting on would let two holders lock two different inodes."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def check_overlaps(
    path: Path,
    new: list[LedgerEntry],
    expansion=None,
    offset: int | None = None,
    resumable: bool = True,
    *,
    reserve: bool = False,
) -> None:
    """Refuse (UsageError) if `new` overlaps an earlier clean run; with ``reserve``, then
    append `new` durably, atomically across processes (under the ledger's exclusive
    lock), else write nothing.

    Used before any work starts (preflight, ``reserve=False``) and again at reservation.
    ``offset``, when given, lets the refusal name a free --offset; ``resumable``: whether
    the refusal may offer --resume and an expansion (distribution runs); a sequence run
    has neither, so its refusal names only the free --offset.
    """
    if reserve:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path, exclusive=True):
            _refuse_overlaps(path, new, expansion, offset, resumable)
            _append_fresh(path, new)
        interrupt.seeds_reserved()  # a test-only hold (runner/interrupt.py); no-op when unset
    else:
        _refuse_overlaps(path, new, expansion, offset, resumable)


class _Refusal(TypedDict, total=False):
    """check_overlaps' refusal-shaping keywords, typed for check_and_reserve."""

    expansion: Any
    offset: int | None
    resumable: bool


def check_and_reserve(path: Path, new: list[LedgerEntry], **refusal: Unpack[_Refusal]) -> None:
    """:func:`check_overlaps` with ``reserve=True`` (the name the runners call)."""
    check_overlaps(path, new, **refusal, reserve=True)


def _refuse_overlaps(path, new, expansion, offset, resumable) -> None:
    earlier = read_ledger(path)
    mine = {e.run_id for e in new}
    for entry in new:
        if entry.mutant is not None:
            continue
        for old in earlier:
            if not _conflicts(entry, old, mine, expansion):
                continue
            shift = _free_shift(new, earlier, mine, expansion)
            how = (
                f"--offset {offset + shift}"
                if offset is not None
                else f"an --offset {shift} higher"
            )
            more = (
                ", --resume an interrupted run, or declare the protocol an expansion of that run"
                if resumable
                else ""
            )
            raise UsageError(
                f"seeds [{entry.start}, {entry.stop}) of group {entry.group!r} overlap "
                f"[{old.start}, {old.stop}) of {describe_attempt(old.run_id, path.parent)} "
                f"in the seed ledger {path}: a replication needs disjoint seeds; use {how} "
                f"(the next free seeds){more}"
            )


def _append_fresh(path: Path, new: list[LedgerEntry]) -> None:
    """Append the entries not yet in the ledger, fsynced (caller holds the lock)."""
    already = {(e.run_id, e.group) for e in read_ledger(path)}
    fresh = [e for e in new if (e.run_id, e.group) not in already]
    if not fresh:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for entry in fresh:
            fh.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def release(path: Path, attempt: str) -> None:
    """Remove every entry of `attempt` (a run refused after reserving: its seeds were
    never used). Rewrites the ledger atomically under the lock."""
    if not path.exists():
        return
    with _locked(path, exclusive=True):
        entries = read_ledger(path)
        kept = [e for e in entries if e.run_id != attempt]
        if len(kept) == len(entries):
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for entry in kept:
                fh.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def _conflicts(entry: LedgerEntry, old: LedgerEntry, mine: set[str], expansion) -> bool:
    if (
        entry.mutant is not None
        or old.mutant is not None
        or old.run_id in mine
        or old.protocol_name != entry.protocol_name
        or old.group != entry.group
    ):
        return False
    if not (old.start < entry.stop and entry.start < old.stop):
        return False
    return not (expansion is not None and _expands(entry, old, expansion))


def _free_shift(
    new: list[LedgerEntry], earlier: list[LedgerEntry], mine: set[str], expansion
) -> int:
    """The smallest shift s >= 0 of every new range that overlaps no earlier clean run
    (monotone: each step moves past one blocking range, so it terminates)."""
    shift = 0
    while True:
        moved = False
        for entry in new:
            shifted = LedgerEntry(
                **{**asdict(entry), "start": entry.start + shift, "stop": entry.stop + shift}
            )
            for old in earlier:
                if _conflicts(shifted, old, mine, None):
                    shift = old.stop - entry.start
                    moved = True
        if not moved:
            return shift


def _expands(entry: LedgerEntry, old: LedgerEntry, expansion) -> bool:
    """The declared earlier range is exactly `old`'s, and `entry` contains it from the
    same start (e.g. 20,000 seeds including the first 5,000 of an earlier run)."""
    group_offset = old.start - expansion.of_offset
    return (
        old.stop - old.start == expansion.of_count
        and group_offset >= 0
        and entry.start == old.start
        and entry.stop >= old.stop
    )
