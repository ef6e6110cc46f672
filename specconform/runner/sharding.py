"""Seed sharding over torch.distributed: one distribution run spread over several
processes (and GPUs), with the same evidence as one process.

The unit of work is the protocol's batch plan (`distribution.batch_plan`), which the
protocol fixes independently of the number of processes: rank r of N generates the
batches whose index i in the plan has i % N == r, and writes each batch file into the
run's shared checkpoint folder exactly as a single process would. Rank 0 (the leader)
creates the checkpoint folder and the seed ledger entries for the whole run before any
rank generates, and after a barrier reads every batch file, replays the reference,
evaluates and seals the one archive. Because a batch's tokens depend only on its seeds
and the engine configuration (request-owned RNG, DESIGN.md contract 2; the same
property `--resume` relies on), raw data and results are byte-identical for any N, and
a run interrupted under one N resumes under another.

Processes are started by ``torchrun`` (or ``specconform run --nproc N``, which launches
it). Control messages (who owns the folder, whether every rank can run) travel over a
Gloo group on every backend; data travels through files, so NCCL is never needed for
correctness. On CUDA each rank takes device ``LOCAL_RANK % device_count``.

Torch is imported only when a run really has several processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from specconform.util.errors import EXIT_INCOMPLETE, EXIT_USAGE, UsageError
from specconform.util.progress import notice

# torchrun sets these for every worker (and nothing else does).
_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# The launcher (`--nproc`) asks the leader to write its exit code here, so that the
# launcher exits like a one-process run (0 PASS, 1 FAIL, 2 bad input) instead of with
# torchrun's generic failure code.
RESULT_FILE_ENV = "SPECCONFORM_RESULT_FILE"
# A stuck rank ends the run instead of hanging it: generous, since one batch of a large
# protocol can take minutes.
_COLLECTIVE_TIMEOUT = timedelta(minutes=int(os.environ.get("SPECCONFORM_SHARD_TIMEOUT_MIN", "60")))


@dataclass(frozen=True)
class Shard:
    """This process's place in the run: rank of world_size (local_rank on its host)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def owns(self, batch_index: int) -> bool:
        """Whether this rank generates batch `batch_index` of the plan (round-robin)."""
        return batch_index % self.world_size == self.rank


def current_shard() -> Shard:
    """The shard torchrun assigned through the environment; one process otherwise."""
    if not all(name in os.environ for name in _RANK_ENV):
        return Shard()
    try:
        rank, world, local = (int(os.environ[name]) for name in _RANK_ENV)
    except ValueError:
        raise UsageError(
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers "
            f"(got {[os.environ[n] for n in _RANK_ENV]})"
        ) from None
    if not (0 <= rank < world and local >= 0):
        raise UsageError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return Shard(rank, world, local)


class Coordinator:
    """The control channel between ranks; a no-op for a one-process run."""

    def __init__(self, shard: Shard):
        self.shard = shard
        self._dist = None
        if shard.distributed:
            import torch.distributed as dist

            if not dist.is_initialized():
                # NVLink multicast stays off (it can take a shared host's GPUs down).
                os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
                dist.init_process_group(backend="gloo", timeout=_COLLECTIVE_TIMEOUT)
            self._dist = dist

    def agree(self, error: str | None) -> None:
        """Every rank reports its pre-start check; if any failed, every rank refuses
        with the same one line (naming the rank), before anything is written."""
        if self._dist is None:
            if error:
                raise UsageError(error)
            return
        errors: list[str | None] = [None] * self.shard.world_size
        self._dist.all_gather_object(errors, error)
        bad = [(r, e) for r, e in enumerate(errors) if e]
        if bad:
            rank, message = bad[0]
            raise UsageError(f"rank {rank} of {self.shard.world_size}: {message}")

    def share(self, value):
        """The leader's `value` on every rank."""
        if self._dist is None:
            return value
        box = [value if self.shard.is_leader else None]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self._dist is not None:
            self._dist.barrier()

    def close(self) -> None:
        if self._dist is not None and self._dist.is_initialized():
            self._dist.destroy_process_group()
            self._dist = None


def select_device(shard: Shard, device: str) -> None:
    """On CUDA, pin this rank to its GPU (ranks beyond the device count share GPUs)."""
    if device != "cuda" or not shard.distributed:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(shard.local_rank % torch.cuda.device_count())


def report_exit_code(code: int) -> int:
    """Called by the leader before it exits: tell the `--nproc` launcher how the run
    ended. Returns the code this process should exit with: 0 under the launcher (so that
    torchrun does not report a FAIL verdict as a crashed worker), else `code`."""
    path = os.environ.get(RESULT_FILE_ENV)
    if path:
        Path(path).write_text(str(int(code)))
        return 0
    return code


def launch(nproc: int, argv: list[str]) -> int:
    """Run ``specconform <argv>`` under torchrun with `nproc` processes on this host and
    return the exit code a one-process run would have given.

    `argv` must not contain ``--nproc`` (the workers are the shards). Standalone
    rendezvous on this host; docs/scaling.md shows the flags for several nodes.
    """
    if nproc < 1:
        raise UsageError(f"--nproc {nproc}: needs at least one process")
    fd, result = tempfile.mkstemp(prefix="specconform-result-")
    os.close(fd)
    os.unlink(result)
    env = {**os.environ, RESULT_FILE_ENV: result, "NCCL_NVLS_ENABLE": "0"}
    if "OMP_NUM_THREADS" not in env:
        # torchrun would set 1. CPU results (matmul reduction order) depend on the intra-op
        # thread count, so every shard keeps the count a one-process run uses here: the
        # evidence is then byte-identical to that run's (slower shards on a CPU host are
        # the price; on GPUs the CPU thread count does not enter the results).
        import torch

        env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "specconform",
        *argv,
    ]
    try:
        proc = subprocess.run(cmd, env=env, check=False)
        try:
            return int(Path(result).read_text())
        except (OSError, ValueError):
            # The leader never finished: a rank died or refused. torchrun has printed
            # which; the checkpoint folder (if one was made) stays for --resume.
            notice(
                f"error: the {nproc}-process run did not finish (torchrun exit "
                f"{proc.returncode}); continue it with --resume if a checkpoint "
                "folder was written"
            )
            return proc.returncode if proc.returncode in (EXIT_USAGE, 130) else EXIT_INCOMPLETE
    finally:
        Path(result).unlink(missing_ok=True)
