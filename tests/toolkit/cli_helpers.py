"""Run the real `specconform` command in a subprocess (exit codes, stdout, stderr)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, env=None, cwd=None, timeout=600, **popen) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["CI"] = "true"  # plain progress lines, no terminal control codes
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "specconform", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=timeout,
        **popen,
    )


def assert_cli_refused(result, code: int, fragment: str) -> None:
    """The command refused with exit ``code`` and one line ``error: ...`` naming
    ``fragment``, no traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]
