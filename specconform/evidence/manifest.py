"""The environment manifest (`environment.json`) and the volatile facts (`volatile.json`).

`environment_manifest()` describes the machine and software that produced a run and is
deterministic for one machine and checkout: it holds no times, host names or process
ids. The code that ran is identified by the git commit and dirty flag of the checkout
the specconform package was loaded from (`git`, not the working directory's repository)
and by a digest of the specconform and engine_under_test source files (`code`), which
holds outside any checkout too. Those go into `volatile_facts()`, written to `volatile.json`, the one file declared
to differ between two otherwise identical runs.

torch is never imported at module import time (verify and report run without it); the
manifest imports it lazily, inside a try, to record torch, CUDA and GPU facts when the
run's environment has it.
"""

from __future__ import annotations

import hashlib
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
_RECORDED_PACKAGES = (
    "numpy",
    "scipy",
    "pandas",
    "statsmodels",
    "matplotlib",
    "cryptography",
    "pydantic",
    "pyyaml",
)


def environment_manifest() -> dict[str, Any]:
    """Facts about the environment of the current process, deterministic per machine."""
    import specconform

    return {
        "specconform_version": specconform.__version__,
        "git": _git_state(_package_dir()),
        "code": _code_digest(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
        },
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
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _package_dir() -> Path:
    import specconform

    return Path(specconform.__file__).resolve().parent


def git_state(package_dir: Path) -> dict[str, Any]:
    """Commit and dirty flag of the checkout a package folder was loaded from (the rules
    of :func:`_git_state`): specconform's own here, an engine's in run.json
    (specconform.adapters.provenance)."""
    return _git_state(package_dir)


def _git_state(package_dir: Path) -> dict[str, Any]:
    """Commit and dirty flag of the git checkout the specconform package that is running
    was loaded from (never the working directory's repository); Nones when the package
    is not a tracked file of a checkout (an installed wheel, an sdist, a copy).

    Untracked files do not count as dirty: a run's own output (reports/) must not make
    the next identical run look dirty.
    """
    if shutil.which("git") is None:
        return {"commit": None, "dirty": None}
    top = _run(["git", "-C", str(package_dir), "rev-parse", "--show-toplevel"])
    if not top:
        return {"commit": None, "dirty": None}
    init = (
        (package_dir / "__init__.py").relative_to(Path(top).resolve()).as_posix()
        if package_dir.is_relative_to(Path(top).resolve())
        else None
    )
    # A package inside a repository but not tracked by it (a venv's site-packages in a
    # project folder) is not that repository's code.
    if init is None or _run(["git", "-C", top, "ls-files", "--error-unmatch", "--", init]) is None:
        return {"commit": None, "dirty": None}
    commit = _run(["git", "-C", top, "rev-parse", "HEAD"])
    if not commit:
        return {"commit": None, "dirty": None}
    status = _run(["git", "-C", top, "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": None if status is None else bool(status)}


_CODE_PACKAGES = ("specconform", "engine_under_test")


def _code_digest() -> dict[str, Any]:
    """What ran, with or without git: the distribution's version (if installed) and one
    sha256 over the sorted (path, sha256) list of every .py file of the specconform and
    engine_under_test packages as loaded. Equal digests: the same code."""
    import importlib.util

    listing = []
    for name in _CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations))).resolve()
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = f"{name}/{path.relative_to(root).as_posix()}"
            listing.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n")
    return {
        "distribution_version": _package_version("specconform"),
        "files": len(listing),
        "sha256": hashlib.sha256("".join(listing).encode()).hexdigest(),
    }


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
            facts["gpus"].append(
                {
                    "index": index,
                    "name": props.name,
                    "uuid": None if uuid is None else f"GPU-{uuid}",
                    "total_memory": props.total_memory,
                    "capability": f"{props.major}.{props.minor}",
                }
            )
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
