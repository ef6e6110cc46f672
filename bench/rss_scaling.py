"""Peak host memory of a distribution run against its seed count (issue 38, part 2).

Runs ``specconform run PROTOCOL --seeds N`` once per N, each in a fresh process, and
prints its wall time, peak RSS (the child's own, from wait4), the archive's size and
raw/samples.csv's size, then the growth per seed between the two largest N and what that
predicts at 10^6 seeds. Flat host memory shows as a growth per seed near 0; what is left
per seed is the per-seed raw data the archive keeps (raw/samples.csv, the evidence
``verify`` recomputes from) and the evaluator's per-seed columns.

GPU (the lead's run; fp32_t2 on the bundled engine):
    python3 bench/rss_scaling.py --seeds 1e5,1e6 --device cuda --json $OUT/rss.json
CPU (the toolkit's share, engine cost aside: the toy numpy engine of examples/):
    python3 bench/rss_scaling.py --protocol examples/my_adapter.yaml --seeds 1e4,1e5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RunMemory:
    seeds: int
    exit_code: int
    wall_s: float
    peak_rss_mb: float  # the run's own process (ru_maxrss of its wait4)
    archive_mb: float
    samples_csv_mb: float  # raw/samples.csv, uncompressed


def run_once(protocol: Path, seeds: int, offset: int, device: str | None, work: Path) -> RunMemory:
    out = work / f"run-{seeds}"
    cmd = [sys.executable, "-m", "specconform", "run", str(protocol), "--seeds", str(seeds)]
    cmd += ["--offset", str(offset), "--out", str(out), "--no-sign"]
    cmd += ["--ledger", str(work / f"ledger-{seeds}.jsonl")]
    if device:
        cmd += ["--device", device]
    env = {**os.environ, "CI": "true"}  # plain progress lines
    t0 = time.perf_counter()
    log = work / f"run-{seeds}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 0 PASS, 1 FAIL: anything else is no measurement
        print(log.read_text(errors="replace")[-2000:], file=sys.stderr)
    archives = sorted(out.glob("*.zip"))
    size = archives[0].stat().st_size / 1e6 if archives else float("nan")
    csv = float("nan")
    if archives:
        with zipfile.ZipFile(archives[0]) as z:
            names = [i for i in z.infolist() if i.filename.endswith("/raw/samples.csv")]
            csv = names[0].file_size / 1e6 if names else float("nan")
    # ru_maxrss is in KiB on Linux.
    return RunMemory(seeds, proc.returncode, wall, usage.ru_maxrss / 1024, size, csv)


# --- the runner's join alone (synthetic batch files, no engine) ---------------------------


def _write_batches(folder: Path, seeds: int, groups=("nospec", "sync", "async", "s1", "a1")):
    """fp32_t2-like batch files (5 groups, 5,000 seeds a batch): the rows' shape, not laws."""
    import numpy as np
    import pandas as pd

    from specconform.runner.checkpoint import SAMPLE_COLUMNS

    rng = np.random.default_rng(0)
    plan, batch = [], 5000
    (folder / "batches").mkdir(parents=True)
    for g in groups:
        for start in range(0, seeds, batch):
            n = min(batch, seeds - start)
            t = rng.integers(0, 20, size=(3, n)) * 977
            acc = rng.integers(0, 4, n)
            frame = pd.DataFrame(
                {
                    "group": g,
                    "seed": np.arange(start, start + n),
                    "t1": t[0],
                    "t2": t[1],
                    "t3": t[2],
                    "first_accepted": (acc > 0).astype(int),
                    "drafted": 3,
                    "accepted": acc,
                    "finish_reason": "length",
                    "rounds": [f"[[3,{a}]]" for a in acc],
                },
                columns=list(SAMPLE_COLUMNS),
            )
            frame.to_csv(folder / "batches" / f"{g}-{start}.csv", index=False, lineterminator="\n")
            plan.append((g, start, start + n))
    return plan


def _join_child(folder: str, plan_json: str, how: str) -> None:
    """In a fresh process: join the batches the old way (parse, concat, write again) or
    the runner's way, then print the bytes' sha256 (both must agree)."""
    import hashlib
    import io

    import pandas as pd

    from specconform.runner.distribution import _join_batches

    plan = [tuple(p) for p in json.loads(plan_json)]
    if how == "old":  # the runner before issue 38
        frames = [pd.read_csv(Path(folder) / "batches" / f"{g}-{a}.csv") for g, a, _ in plan]
        samples = pd.concat(frames, ignore_index=True)
        buf = io.StringIO()
        samples.to_csv(buf, index=False, lineterminator="\n")
        body = buf.getvalue().encode()
    else:
        body, _, _ = _join_batches(Path(folder), plan)
    print(hashlib.sha256(body).hexdigest())


def join_only(seeds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="rss-join-") as tmp:
        plan = _write_batches(Path(tmp), seeds)
        out = {}
        for how in ("old", "new"):
            here = str(Path(__file__).parent)
            code = (
                f"import sys; sys.path.insert(0, {here!r}); "
                "from rss_scaling import _join_child; _join_child(*sys.argv[1:])"
            )
            proc = subprocess.Popen(
                [sys.executable, "-c", code, tmp, json.dumps(plan), how],
                cwd=ROOT,
                stdout=subprocess.PIPE,
            )
            digest = proc.stdout.read().decode().strip() if proc.stdout else ""
            _, _, usage = os.wait4(proc.pid, 0)
            out[how] = {"peak_rss_mb": usage.ru_maxrss / 1024, "sha256": digest}
            print(
                f"  join {how}: {seeds:,} seeds x 5 groups  peak RSS {usage.ru_maxrss / 1024:8.1f} MB"
            )
        assert out["old"]["sha256"] == out["new"]["sha256"], "joined samples.csv differs"
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", type=Path, default=ROOT / "protocols/fp32_t2.yaml")
    ap.add_argument("--seeds", default="1e4,1e5", help="comma-separated seed counts")
    ap.add_argument("--offset", type=int, default=7_000_000, help="first seed")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--join-only",
        action="store_true",
        help="measure the runner's batch join alone, old way vs new, on synthetic batches",
    )
    args = ap.parse_args(argv)
    counts = sorted(int(float(s)) for s in args.seeds.split(","))
    if args.join_only:
        res = {n: join_only(n) for n in counts}
        if args.json:
            args.json.write_text(json.dumps(res, indent=2) + "\n")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="rss-scaling-") as tmp:
        for n in counts:
            print(f"rss_scaling: {args.protocol.name} at {n:,} seeds ...", flush=True)
            r = run_once(args.protocol, n, args.offset, args.device, Path(tmp))
            rows.append(r)
            print(
                f"  seeds {n:>9,}  exit {r.exit_code}  wall {r.wall_s:7.1f} s  "
                f"peak RSS {r.peak_rss_mb:8.1f} MB  archive {r.archive_mb:7.2f} MB  "
                f"samples.csv {r.samples_csv_mb:8.2f} MB",
                flush=True,
            )
    out: dict = {"protocol": str(args.protocol), "runs": [asdict(r) for r in rows]}
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        per_seed = (b.peak_rss_mb - a.peak_rss_mb) * 1e6 / (b.seeds - a.seeds)
        at_1e6 = b.peak_rss_mb + per_seed * (1_000_000 - b.seeds) / 1e6
        out.update({"rss_bytes_per_seed": per_seed, "predicted_rss_mb_at_1e6": at_1e6})
        print(
            f"growth {per_seed:,.0f} bytes of peak RSS per seed (per group count of the "
            f"protocol) between {a.seeds:,} and {b.seeds:,}; predicted at 10^6 seeds: "
            f"{at_1e6:,.0f} MB"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(r.exit_code in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
