"""Peak host memory of a distribution run against its seed count (issue 38, part 2).

Runs ``specconform run PROTOCOL --seeds N`` once per N, each in a fresh process, and
prints its wall time, peak RSS (the child's own, from wait4), the archive's size and
raw/samples.csv's size, then the growth per seed between the two largest N and what that
predicts at 10^6 seeds. Flat host memory shows as a growth per seed near 0. Since issue
38 part 2 raw/samples.csv (the evidence ``verify`` recomputes from) stays on disk: the
runner joins its batches into a file, the evaluator reduces it in chunks of 2^18 rows to
per-cell counts, the archive writer copies it in 1 MiB pieces; what a run holds per seed
is only the seeds of engine errors and the breaks in each group's seed runs.

GPU (the lead's run; fp32_t2 on the bundled engine):
    python3 bench/rss_scaling.py --seeds 1e5,1e6 --device cuda --json $OUT/rss.json
CPU (engine cost aside: the toy numpy engine of examples/):
    python3 bench/rss_scaling.py --protocol examples/my_adapter.yaml --seeds 1e4,1e5,4e5
CPU, the toolkit's share alone (synthetic fp32_t2 batches, 5 groups: join, statistics,
archive), one checkout's code against another's (e.g. a worktree of the commit before):
    python3 bench/rss_scaling.py --toolkit-only --seeds 1e4,1e5,4e5 --root OLD --root .
and `verify` of the sealed (unsigned) archive, in a fresh process per checkout under
/usr/bin/time -v (peak RSS, wall time, exit code; --keep DIR keeps the archives):
    python3 bench/rss_scaling.py --toolkit-only --verify --seeds 1e5,1e6 --root OLD --root .
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_rss import seal_run, verify_rss  # noqa: E402  (a sibling of this file)

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

    from specconform.runner.checkpoint import sample_frame

    rng = np.random.default_rng(0)
    plan, batch = [], 5000
    (folder / "batches").mkdir(parents=True)
    for g in groups:
        for start in range(0, seeds, batch):
            n = min(batch, seeds - start)
            t = rng.integers(0, 20, size=(3, n)) * 977
            acc = rng.integers(0, 4, n)
            frame = sample_frame(
                group=g,
                seed=np.arange(start, start + n),
                tokens=(t[0], t[1], t[2]),
                first_accepted=(acc > 0).astype(int),
                drafted=3,
                accepted=acc,
                finish_reason="length",
                rounds=[f"[[3,{a}]]" for a in acc],
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
    else:  # the runner's: samples.csv on disk (a Path), or its bytes before issue 38 part 2
        body, _, _ = _join_batches(Path(folder), plan)
        if isinstance(body, Path):
            digest = hashlib.sha256()
            with open(body, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            print(digest.hexdigest())
            return
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


# --- the toolkit's share of a run: join, statistics, archive (synthetic, no engine) -----------


def _write_world_batches(folder: Path, protocol: dict, seeds: int, batch: int = 5000) -> list:
    """Batch files of exact-law samples (calibration's synthetic world: vocab 512, top-k
    20, fp32_t2's groups), as the runner writes them, and their plan (run order)."""
    import numpy as np

    from specconform.calibration import make_world, simulate
    from specconform.runner.checkpoint import SAMPLE_COLUMNS

    world = make_world(0)
    rng = np.random.default_rng(0)
    (folder / "batches").mkdir(parents=True)
    plan = {g["name"]: [] for g in protocol["groups"]}
    for start in range(0, seeds, batch):
        frame = simulate(
            world, min(batch, seeds - start), rng, offset=start, groups=protocol["groups"]
        )
        frame["rounds"] = [f"[[3,{a}]]" for a in frame["accepted"]]
        for g in protocol["groups"]:
            part = frame[frame["group"] == g["name"]][list(SAMPLE_COLUMNS)]
            first = int(part["seed"].iloc[0])
            part.to_csv(
                folder / "batches" / f"{g['name']}-{first}.csv", index=False, lineterminator="\n"
            )
            plan[g["name"]].append((g["name"], first, first + len(part)))
    (folder / "reference.json").write_text(json.dumps(world.reference))
    return [b for g in protocol["groups"] for b in plan[g["name"]]]


def _toolkit_child(folder: str, plan_json: str, protocol_json: str, sealed: str = "") -> None:
    """In a fresh process, with whichever checkout's code is first on sys.path: the
    runner's join, the evaluation of the raw files, the archive of them; prints the
    phases' seconds and a digest of the results (old and new code must agree). With
    ``sealed`` "1", also seals the run with its results (unsigned) into
    FOLDER/sealed.zip, an archive `specconform verify` recomputes."""
    import hashlib
    import shutil

    from specconform.evidence.archive import write_reproducible_zip
    from specconform.evidence.jsonio import canonical_json_bytes
    from specconform.kinds import reevaluate
    from specconform.results import RawData
    from specconform.runner.distribution import _join_batches

    root, plan = Path(folder), [tuple(p) for p in json.loads(plan_json)]
    protocol = json.loads(protocol_json)
    t0 = time.perf_counter()
    samples, _, _ = _join_batches(root, plan)  # bytes before issue 38 part 2, a Path after
    t1 = time.perf_counter()
    ref = (root / "reference.json").read_bytes()
    ev = reevaluate(protocol, RawData({"raw/samples.csv": samples, "raw/reference.json": ref}))
    t2 = time.perf_counter()
    run = root / "run"
    (run / "raw").mkdir(parents=True, exist_ok=True)
    if isinstance(samples, Path):
        shutil.copyfile(samples, run / "raw" / "samples.csv")
    else:
        (run / "raw" / "samples.csv").write_bytes(samples)
    (run / "raw" / "reference.json").write_bytes(ref)
    write_reproducible_zip(run, root / "run.zip", top="run")
    t3 = time.perf_counter()
    if sealed == "1":
        seal_run(run, root / "sealed.zip", protocol, ev)
    body = canonical_json_bytes([t.to_json() for t in ev.tests])
    body += canonical_json_bytes(ev.verdict.to_json())
    print(
        json.dumps(
            {
                "join_s": t1 - t0,
                "statistics_s": t2 - t1,
                "archive_s": t3 - t2,
                "results_sha256": hashlib.sha256(body).hexdigest(),
                "verdict": ev.verdict.verdict,
            }
        )
    )


def toolkit_only(
    seeds: int, roots: list[Path], *, verify: bool = False, keep: Path | None = None
) -> dict:
    """Peak RSS of the toolkit's share of a fp32_t2 run at ``seeds`` seeds, per checkout."""
    from specconform.protocol.load import load_protocol

    protocol = load_protocol(ROOT / "protocols/fp32_t2.yaml").data
    out = {}
    with tempfile.TemporaryDirectory(prefix="rss-toolkit-") as tmp:
        plan = _write_world_batches(Path(tmp), protocol, seeds)
        for root in roots:
            for stale in ("samples.csv", "run", "run.zip", "sealed.zip"):
                path = Path(tmp) / stale
                if path.is_dir():
                    import shutil

                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            code = (
                f"import sys; sys.path[:0] = [{str(root)!r}, {str(Path(__file__).parent)!r}]; "
                "from rss_scaling import _toolkit_child; _toolkit_child(*sys.argv[1:])"
            )
            env = {**os.environ, "PYTHONPATH": str(root)}
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-c", code, tmp, json.dumps(plan)),
                    *(json.dumps(protocol), "1" if verify else ""),
                ],
                cwd=root,
                env=env,
                stdout=subprocess.PIPE,
            )
            text = proc.stdout.read().decode() if proc.stdout else ""
            _, status, usage = os.wait4(proc.pid, 0)
            row = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
            row.update(peak_rss_mb=usage.ru_maxrss / 1024, exit=os.waitstatus_to_exitcode(status))
            row["samples_csv_mb"] = (Path(tmp) / "run/raw/samples.csv").stat().st_size / 1e6
            out[str(root)] = row
            print(
                f"  toolkit {root.name}: {seeds:,} seeds x 5 groups  peak RSS "
                f"{row['peak_rss_mb']:8.1f} MB  samples.csv {row['samples_csv_mb']:7.1f} MB  "
                f"join {row.get('join_s', 0):.1f}s stats {row.get('statistics_s', 0):.1f}s "
                f"archive {row.get('archive_s', 0):.1f}s  {row.get('results_sha256', '')[:12]}",
                flush=True,
            )
            if verify:
                import hashlib

                archive = Path(tmp) / "sealed.zip"
                row["archive_sha256"] = hashlib.sha256(archive.read_bytes()).hexdigest()
                row["archive_mb"] = archive.stat().st_size / 1e6
        if verify:  # every checkout verifies the archive the last one sealed
            archive = Path(tmp) / "sealed.zip"
            for root in roots:
                res = verify_rss(archive, root)
                out[str(root)]["verify"] = res
                print(
                    f"  verify {root.name}: {seeds:,} seeds  exit {res['exit']}  peak RSS "
                    f"{res['peak_rss_mb']:8.1f} MB  wall {res['wall_s']:.1f}s  "
                    f"archive {archive.stat().st_size / 1e6:.1f} MB  {res['lines'][-1][:90]}",
                    flush=True,
                )
            if keep is not None:
                import shutil

                keep.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(archive, keep / f"fp32_t2-synthetic-{seeds}.zip")
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
    ap.add_argument(
        "--toolkit-only",
        action="store_true",
        help="measure the toolkit's share (join, statistics, archive) on synthetic fp32_t2 "
        "batches, no engine; --root names the checkouts whose code runs (default: this one)",
    )
    ap.add_argument("--root", action="append", type=Path, default=None)
    ap.add_argument(
        "--verify",
        action="store_true",
        help="with --toolkit-only: seal the run (unsigned) and measure `specconform verify "
        "--skip-signature` of it per checkout in a fresh process (/usr/bin/time -v)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="with --verify: keep the archives here")
    args = ap.parse_args(argv)
    counts = sorted(int(float(s)) for s in args.seeds.split(","))
    if args.toolkit_only:
        roots = [r.resolve() for r in (args.root or [ROOT])]
        res = {n: toolkit_only(n, roots, verify=args.verify, keep=args.keep) for n in counts}
        for root in roots:
            a, b = (res[n][str(root)] for n in counts[-2:]) if len(counts) > 1 else (None, None)
            if a is not None:
                per = (b["peak_rss_mb"] - a["peak_rss_mb"]) * 1e6 / (counts[-1] - counts[-2])
                print(
                    f"{root.name}: growth {per:,.0f} bytes of peak RSS per seed (5 groups) "
                    f"between {counts[-2]:,} and {counts[-1]:,}"
                )
                if args.verify:
                    va, vb = a["verify"], b["verify"]
                    per = (vb["peak_rss_mb"] - va["peak_rss_mb"]) * 1e6 / (counts[-1] - counts[-2])
                    print(
                        f"{root.name}: verify growth {per:,.0f} bytes of peak RSS per seed "
                        f"(exit {va['exit']} and {vb['exit']})"
                    )
        if args.json:
            args.json.write_text(json.dumps(res, indent=2) + "\n")
        return 0
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
