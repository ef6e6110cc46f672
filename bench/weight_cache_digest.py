"""Benchmark: checking a weight-cache entry, one sequential sha256 against the piecewise
digest of engine_under_test/model/weight_cache.py (64 MiB pieces hashed in threads).

Side by side in one process, on a file the size of ``small``'s fp32 entry (0.78 GB) in
the page cache, interleaved, median of --runs:

    .venv/bin/python bench/weight_cache_digest.py [--mb 780] [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)

from engine_under_test.model.weight_cache import _file_digest


def sequential_sha256(path: Path) -> str:
    """The digest before: one pass, 8 MiB reads."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=780)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "entry.pt"
        path.write_bytes(os.urandom(args.mb << 20))
        sequential_sha256(path)  # into the page cache, as a just-written or reused entry
        times: dict[str, list[float]] = {"sequential sha256": [], "piecewise (threads)": []}
        for _ in range(args.runs):
            for name, fn in (
                ("sequential sha256", sequential_sha256),
                ("piecewise (threads)", _file_digest),
            ):
                t0 = time.perf_counter()
                fn(path)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"# {args.mb} MB, {os.cpu_count()} CPUs, median of {args.runs}")
    for name, t in med.items():
        print(f"{name:<22} {t:.3f} s  ({args.mb / 1024 / t:.2f} GB/s)")
    print(f"speed-up {med['sequential sha256'] / med['piecewise (threads)']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
