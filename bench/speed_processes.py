"""Child processes of bench/speed_at_bound.py: each part's command under its own time
limit (wall time and the child's own peak RSS), and the phase profile a protocol run's
``timing:`` lines give."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Finished:
    code: int
    wall_s: float
    peak_rss_mb: float
    stderr: str
    timed_out: bool = False


def run(cmd: list[str], limit: float, *, env=None, log: Path) -> Finished:
    """Run ``cmd`` from the repository root, stdout/stderr to ``log`` (tee'd to ours),
    killed after ``limit`` seconds; wall time and the child's own peak RSS (wait4)."""
    print(f"+ {' '.join(cmd)}  (limit {limit:.0f} s)", flush=True)
    t0 = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT
        )
        deadline, timed_out = t0 + limit, False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                timed_out = True
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    print(text[-4000:] if code not in (0, 1, 7) else tail(text, 15), flush=True)
    print(f"  exit {code} in {wall:.1f} s, peak RSS {usage.ru_maxrss / 1024:.0f} MB", flush=True)
    if timed_out:
        print(f"  timed out after {limit:.0f} s (--limit-PART raises it)", flush=True)
    return Finished(code, wall, usage.ru_maxrss / 1024, text, timed_out)


def tail(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


TIMING = re.compile(r"^timing: (.*?) in ([0-9.]+)s")
STARTUP = re.compile(r"^timing: collection starts at ([0-9.]+)s after process start")


def profile(stderr: str) -> dict[str, float]:
    """Seconds per phase from a run's ``timing:`` lines (engine = the groups' generation)."""
    phases = {
        "startup": 0.0,  # interpreter, imports and input checks before collection
        "engine load": 0.0,
        "engine": 0.0,
        "reference replay": 0.0,
        "statistics": 0.0,
        "archive": 0.0,
    }
    for line in stderr.splitlines():
        start = STARTUP.match(line.strip())
        if start:
            phases["startup"] = float(start.group(1))
        m = TIMING.match(line.strip())
        if not m:
            continue
        what, s = m.group(1), float(m.group(2))
        if what.startswith("engine adapter loaded"):
            phases["engine load"] += s
        elif what.startswith("group "):
            phases["engine"] += s
        elif what.startswith("reference replay"):
            phases["reference replay"] += s
        elif what.startswith("statistics"):
            phases["statistics"] += s
        elif what.startswith(("plan, files and seal", "batch files")):
            phases["archive"] += s
    return phases
