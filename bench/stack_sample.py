"""Where a long run's wall time goes, per thread, at little cost (issue 38, part 2).

cProfile slows sequence.yaml by ~30 % (every Python call is timed) and shows no threads
but the main one; this samples instead: a daemon thread reads every thread's stack
(``sys._current_frames``) each ``--interval`` seconds while the module runs in this
process, then prints, per thread name, the functions by the share of samples in which
they were on the stack (inclusive) and at its top (self). A sample costs one frame walk
per thread, so the run's wall moves by a few percent at the default 10 ms.

    python3 bench/stack_sample.py --json $OUT/stacks.json -m specconform run \
        protocols/sequence.yaml --no-sign --out /tmp/seq

Frames are named ``file:function`` (file relative to this checkout or site-packages);
numpy and torch calls from C show as the Python line that called them.
"""

from __future__ import annotations

import argparse
import atexit
import json
import re
import runpy
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def frame_name(code) -> str:
    path = code.co_filename
    if path.startswith(ROOT):
        path = path[len(ROOT) :]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    return f"{path}:{code.co_name}"


@dataclass
class ThreadSamples:
    """Sample counts of one thread name: inclusive (on the stack) and self (on top)."""

    samples: int = 0
    inclusive: Counter = field(default_factory=Counter)
    self_: Counter = field(default_factory=Counter)


class StackSampler:
    def __init__(self, interval: float):
        self.interval = interval
        self.threads: dict[str, ThreadSamples] = defaultdict(ThreadSamples)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stack-sampler", daemon=True)

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                # numbered threads of one kind (token-rows_0, Thread-12): one row
                name = re.sub(r"[-_]\d+$", "", names.get(ident, "?"))
                rec = self.threads[name]
                rec.samples += 1
                seen = set()
                top = True
                while frame is not None:
                    fn = frame_name(frame.f_code)
                    if top:
                        rec.self_[fn] += 1
                        top = False
                    if fn not in seen:  # recursion counts once
                        rec.inclusive[fn] += 1
                        seen.add(fn)
                    frame = frame.f_back

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int) -> dict:
        out = {}
        for name, rec in sorted(self.threads.items(), key=lambda kv: -kv[1].samples):
            n = max(rec.samples, 1)
            # frames on every sample (the thread's entry, runpy, the CLI's layers) say
            # nothing about where the time goes: left out
            inclusive = [(f, c / n) for f, c in rec.inclusive.most_common() if c < 0.98 * n]
            out[name] = {
                "samples": rec.samples,
                "seconds": rec.samples * self.interval,
                "inclusive": inclusive[:top],
                "self": [(f, c / n) for f, c in rec.self_.most_common(top)],
            }
        return out


def print_report(report: dict, wall: float, max_threads: int = 4) -> None:
    print(f"\n# stack samples, wall {wall:.1f} s")
    for name, rec in list(report.items())[:max_threads]:
        print(f"\n== thread {name}: {rec['samples']} samples (~{rec['seconds']:.1f} s)")
        print("  inclusive:")
        for f, share in rec["inclusive"]:
            print(f"    {share:6.1%}  {f}")
        print("  self:")
        for f, share in rec["self"][:12]:
            print(f"    {share:6.1%}  {f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.01, help="seconds between samples")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("-m", dest="module", required=True, help="module to run, then its argv")
    a, rest = ap.parse_known_args()
    if a.interval <= 0:
        ap.error("--interval must be > 0")
    sys.argv = [a.module, *rest]
    t0 = time.perf_counter()
    sampler = StackSampler(a.interval).__enter__()
    done = []

    def finish(code: int) -> None:
        """Stop sampling and report, once: on return, or from atexit (specconform's CLI
        leaves through os._exit after running the atexit handlers)."""
        if done:
            return
        done.append(code)
        sampler.__exit__()
        wall = time.perf_counter() - t0
        report = sampler.report(a.top)
        print_report(report, wall)
        sys.stdout.flush()
        if a.json is not None:
            a.json.write_text(json.dumps({"wall_s": wall, "threads": report}, indent=1))

    atexit.register(finish, -1)
    code = 0
    try:
        runpy.run_module(a.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:  # the module's exit code is ours
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finish(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
