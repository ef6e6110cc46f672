"""The run lock: tells a live run from an interrupted one.

`run_lock(out_dir, run_id)` holds an exclusive `fcntl.flock` on `OUT/.<run-id>.lock`
for the whole of a distribution run (from before its ledger reservation until its
archive is in place); the file says "pid P on host H". A second run of the same inputs
finds the lock held and is told the first is live (`lock_holder`); a checkpoint folder
whose lock nobody holds is an interrupted run, to be continued with --resume. A flock
dies with its process, so a kill -9 never leaves a run looking live (unlike a pid file
alone, which a reused pid can fake).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specconform.util.errors import UsageError


def _lock_file(out_dir: Path, run_id: str) -> Path:
    return Path(out_dir) / f".{run_id}.lock"


def lock_holder(out_dir: Path, run_id: str) -> str | None:
    """'pid P on host H' if a live process holds the run's lock; None otherwise."""
    path = _lock_file(out_dir, run_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            owner = os.read(fd, 256).decode(errors="replace").strip() or "unknown"
            return owner
        return None
    finally:
        os.close(fd)


@contextmanager
def run_lock(out_dir: Path, run_id: str) -> Iterator[None]:
    """Hold the run's lock for the body; a created OUT and the lock file are removed
    after (OUT only if it is left empty)."""
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = _lock_file(out_dir, run_id)
    fd = -1
    try:
        fd = _acquire(path, run_id, out_dir)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode())
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still locked: a waiter sees a dead inode
    finally:
        if fd >= 0:
            os.close(fd)
        if created:
            try:
                out_dir.rmdir()  # only if nothing else was written
            except OSError:
                pass


def _acquire(path: Path, run_id: str, out_dir: Path) -> int:
    """An fd holding the exclusive flock of the file now at `path`. A holder unlinks
    the file before releasing it, so a lock won on an inode no longer at `path` is
    retried on the new file."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.read(fd, 256).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"run {run_id} is live ({owner}) in {out_dir}; wait for it "
                "to finish or choose another --out"
            ) from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
