"""`specconform.cli.main` leaves without interpreter teardown (`cli._leave`): the exit
code, every buffered line, non-daemon threads and atexit handlers must survive that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A buffered stdout (a pipe), an atexit handler, and a non-daemon thread that is still
# running when main() reaches _leave and writes a file only after that: a plain os._exit
# would lose all three. The thread waits for an event that a wrapper around _leave sets,
# so it is alive at _leave on any machine (a sleep made that a race with the command).
SCRIPT = """
import atexit, sys, threading
from pathlib import Path
atexit.register(lambda: print("atexit ran"))
late_file = Path(sys.argv[1])
leaving = threading.Event()
def late():
    leaving.wait()
    late_file.write_text("thread finished")
threading.Thread(target=late).start()
sys.argv = ["specconform", *sys.argv[2:]]
from specconform import cli
real_leave = cli._leave
def leave(code):
    leaving.set()
    real_leave(code)
cli._leave = leave
cli.main()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "late.txt"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,  # a hang guard only: the thread waits for _leave, which must come
    )


def test_leave_keeps_output_threads_and_atexit(tmp_path):
    done = _run(tmp_path, "schema")
    assert done.returncode == 0, done.stderr
    assert "overridable" in done.stdout  # the command's own (buffered) output
    assert done.stdout.rstrip().endswith("atexit ran")
    assert (tmp_path / "late.txt").read_text() == "thread finished"


def test_leave_keeps_the_exit_code_of_an_error(tmp_path):
    done = _run(tmp_path, "run", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    assert (tmp_path / "late.txt").read_text() == "thread finished"


def test_a_profiled_run_exits_normally_and_writes_its_profile(tmp_path):
    """`python -m cProfile -o F -m specconform ...` (bench/gpu_session.sh fp32prof)
    writes F after main returns: _leave must not os._exit under a profiler."""
    profile = tmp_path / "cli.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "specconform", "schema"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "overridable" in done.stdout
    assert profile.stat().st_size > 0
