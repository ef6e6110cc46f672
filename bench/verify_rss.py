"""`specconform verify` of a sealed fp32_t2-shaped archive: its peak RSS in a fresh
process (issue 38 part 2), for bench/rss_scaling.py --toolkit-only --verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def seal_run(run: Path, target: Path, protocol: dict, ev) -> None:
    """The files `verify` reads (protocol.json, run.json, results, verdict, raw/) of the
    run folder `run`, sealed unsigned and moved to `target`."""
    import hashlib
    import shutil

    from specconform.evidence import seal, write_results
    from specconform.evidence.jsonio import canonical_json_bytes

    text = canonical_json_bytes(protocol)
    run_id = "fp32_t2-synthetic-" + hashlib.sha256(text).hexdigest()[:8]
    (run / "protocol.json").write_bytes(text)
    run_json = {
        "run_id": run_id,
        "protocol_name": protocol.get("name", "fp32_t2"),
        "protocol_hash": hashlib.sha256(text).hexdigest(),
        "kind": protocol.get("kind", "distribution"),
    }
    (run / "run.json").write_bytes(canonical_json_bytes(run_json))
    write_results(run, ev)
    shutil.move(seal(run, key=None, sign=False), target)


def verify_rss(archive: Path, root: Path) -> dict:
    """`specconform verify ARCHIVE --skip-signature` with ``root``'s code in a fresh
    process under /usr/bin/time -v: exit code, wall seconds, peak RSS (MB), its lines."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "specconform", "verify"]
    cmd += [str(archive), "--skip-signature"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    stats = {}
    for line in done.stderr.splitlines():
        key, _, value = line.strip().rpartition(": ")
        stats[key] = value
    wall = stats.get("Elapsed (wall clock) time (h:mm:ss or m:ss)", "0:0")
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    said = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line and not line.startswith("\t") and "Command being timed" not in line
    ]
    return {
        "exit": done.returncode,
        "wall_s": seconds,
        "peak_rss_mb": int(stats.get("Maximum resident set size (kbytes)", 0)) / 1024,
        "lines": said[:8],
    }
