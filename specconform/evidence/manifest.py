"""The environment manifest (`environment.json`) and the volatile facts (`volatile.json`).

`environment_manifest()` describes the machine and software that produced a run and is
deterministic for one machine and checkout: it holds no times, host names or process
ids. Those go into `volatile_facts()`, written to `volatile.json`, the one file declared
to differ between two otherwise identical runs.

torch is never imported at module import time (verify and report run without it); the
manifest imports it lazily, inside a try, to record torch, CUDA and GPU facts when the
run's environment has it.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# Packages whose versions can change a recomputed statistic or the archive's bytes.
_RECORDED_PACKAGES = ("numpy", "scipy", "pandas", "statsmodels", "matplotlib",
                      "cryptography", "pydantic", "pyyaml")


def environment_manifest() -> dict[str, Any]:
    """Facts about the environment of the current process, deterministic per machine."""
    import specconform

    return {
        "specconform_version": specconform.__version__,
        "git": _git_state(Path.cwd()),
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": {"system": platform.system(), "release": platform.release(),
                     "machine": platform.machine(), "platform": platform.platform()},
        "cpu": {"model": _cpu_model(), "logical_cores": os.cpu_count()},
        "packages": {name: _package_version(name) for name in _RECORDED_PACKAGES},
        "torch": _torch_facts(),
        "world_size": _world_size(),
    }


def volatile_facts(started_at: datetime, finished_at: datetime) -> dict[str, Any]:
    """The facts allowed to differ between identical runs: times, host name, process id.

    Naive datetimes are taken to be UTC; all times are written in UTC ISO 8601.
    """
    start, finish = _utc(started_at), _utc(finished_at)
    return {
        "started_at": start.isoformat().replace("+00:00", "Z"),
        "finished_at": finish.isoformat().replace("+00:00", "Z"),
        "duration_s": round((finish - start).total_seconds(), 6),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _run(argv: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a helper program, or None if it is missing or fails."""
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_state(cwd: Path) -> dict[str, Any]:
    """Commit and dirty flag of the repository containing `cwd`, or Nones outside one.

    Untracked files do not count as dirty: a run's own output (reports/) must not make
    the next identical run look dirty.
    """
    if shutil.which("git") is None:
        return {"commit": None, "dirty": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd)
    if not commit:
        return {"commit": None, "dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "Processor"):
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _world_size() -> int | str:
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(raw)
    except ValueError:
        return raw  # recorded as given: the manifest describes, it does not validate


def _torch_facts() -> dict[str, Any] | None:
    """torch, triton, CUDA, driver and GPU facts; None where torch is not importable."""
    try:
        import torch
    except Exception:  # ImportError, or a broken CUDA install failing at import
        return None
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "triton": _package_version("triton") or _package_version("pytorch-triton"),
        "cuda_available": False,
        "driver": None,
        "gpus": [],
    }
    try:
        if not torch.cuda.is_available():
            return facts
        facts["cuda_available"] = True
        facts["cudnn"] = torch.backends.cudnn.version()
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            uuid = getattr(props, "uuid", None)
            facts["gpus"].append({
                "index": index, "name": props.name,
                "uuid": None if uuid is None else f"GPU-{uuid}",
                "total_memory": props.total_memory,
                "capability": f"{props.major}.{props.minor}",
            })
    except Exception as exc:  # a manifest must not fail a run; record why it is partial
        facts["error"] = f"{type(exc).__name__}: {exc}"
    facts["driver"] = _nvidia_driver()
    return facts


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if not out:
        return None
    return sorted(set(out.splitlines()))[0].strip()
