"""Real-engine null calibration (issue 32, part 2): a shipped protocol file, as written,
run N times on the bundled (clean) engine over disjoint seed ranges; how often does its
verdict FAIL, and what is the Clopper-Pearson 95% upper bound of that rate?

Each run is a real run through the same assembly as `specconform run` (the Python API:
protocol loaded and checked, the kind's runner, the kind's evaluator, an unsigned archive
written to a scratch folder and removed), at ``--offset B + r * stride``: ``stride`` is
the span of the protocol's seed ranges (Kind.seed_ranges), so no two runs share a seed.
The engine adapter is built once and reused by every run of the process (the runners'
``load_engine`` is wrapped by a cache; the adapter's ``close`` runs at exit), so N runs
cost N generations, not N model loads. ``--check-reuse`` runs the first offset twice,
once with a fresh adapter, and refuses to go on unless both give the same
results/tests.json and verdict.json byte for byte.

One CSV row per run is appended as soon as it ends (offset, verdict, failed and
inconclusive tests, deciding near-ties if the archive reports them, seconds, device),
so an interrupted measurement continues with ``--resume`` (offsets already in the CSV
are skipped). The table at the end reads the whole CSV.

    python bench/calibration_real_engine.py protocols/ci_gate.yaml --runs 500 \
        --offset-base 50000000 --out docs/evidence/calibration/ci_gate_real.csv --device cuda
    python bench/calibration_real_engine.py protocols/ci_sequence.yaml --runs 200 \
        --offset-base 70000000 --out docs/evidence/calibration/ci_sequence_real.csv
"""

from __future__ import annotations

import argparse
import atexit
import csv
import io
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from scipy.stats import binomtest

# protocol_hash: the file the run used (a CSV never mixes two); min_p_adjusted: the
# smallest adjusted p of the deciding p-value family, so that the same runs can be read at
# another family level without re-running them (empty where the family had no p-value);
# source: "run", or "carried <hash>" for a PASS carried from a file that differed only in
# a smaller numerics reserve (bench/calibration_carry.py).
COLUMNS = (
    "offset", "verdict", "failed", "inconclusive", "near_ties", "seconds", "device",
    "protocol_hash", "min_p_adjusted", "source",
)  # fmt: skip


def seed_span(protocol: Path) -> int:
    """Seeds one run occupies from its offset: the end of its furthest seed range."""
    from specconform.kinds.registry import kind_of
    from specconform.protocol.load import apply_overrides, load_protocol

    loaded = apply_overrides(load_protocol(protocol), {"--offset": 0})
    ranges = kind_of(loaded.kind).seed_ranges
    if ranges is None:
        raise SystemExit(f"{protocol}: a {loaded.kind} protocol draws no seeds from a plan")
    return max(stop for _, _, stop in ranges(loaded.model))


class EngineCache:
    """Wraps ``specconform.adapters.engine.load_engine``: one adapter per engine section
    and mutant for the whole process; the runners' ``close()`` is deferred to exit."""

    def __init__(self):
        import specconform.adapters.engine as module

        self.module, self.real = module, module.load_engine
        self.engines: dict[str, object] = {}
        module.load_engine = self.load
        atexit.register(self.close_all)

    def load(self, spec, *, mutant=None, log=print):
        key = json.dumps([spec.model_dump(mode="json"), mutant], sort_keys=True)
        if key not in self.engines:
            engine = self.real(spec, mutant=mutant, log=log)
            self.engines[key] = (engine, engine.close)
            engine.close = lambda: None  # the next run reuses it
        return self.engines[key][0]

    def fresh(self):
        """Build the next adapter anew (``--check-reuse``)."""
        self.close_all()
        self.engines.clear()

    def close_all(self):
        for _, close in self.engines.values():
            close()


def one_run(
    protocol: Path, offset: int, device: str | None, keep: Path | None = None
) -> tuple[dict, dict[str, bytes]]:
    """One run; its archive is deleted unless ``keep`` names a folder and the verdict is
    not PASS (a calibration FAIL must be readable afterwards: which check, which token)."""
    import specconform

    scratch = Path(tempfile.mkdtemp(prefix="calib-real-"))
    try:
        started = time.perf_counter()
        run = specconform.run(protocol, offset=offset, device=device, out=scratch, sign=False)
        seconds = time.perf_counter() - started
        with zipfile.ZipFile(run.archive) as zf:
            top = run.run_id
            kept = {n: zf.read(f"{top}/{n}") for n in ("results/tests.json", "verdict.json")}
            env = json.loads(zf.read(f"{top}/run.json"))
        verdict = run.evaluation.verdict
        ties = near_ties(run.tests)
        adjusted = [
            r.adjusted_pvalue for r in run.tests if r.deciding and r.adjusted_pvalue is not None
        ]
        row = {
            "offset": offset,
            "verdict": verdict.verdict,
            "failed": " ".join(verdict.failed),
            "inconclusive": " ".join(getattr(verdict, "inconclusive", ())),
            "near_ties": ties,
            "seconds": round(seconds, 2),
            "device": env.get("device", device or ""),
            "min_p_adjusted": f"{min(adjusted):.6g}" if adjusted else "",
        }
        if keep is not None and verdict.verdict != "PASS":
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run.archive, keep / Path(run.archive).name)
        return row, kept
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def near_ties(tests) -> int:
    """Near-ties the deciding deterministic rows report (their detail's ``near_ties``,
    when the kind states them), summed; 0 where no row states any."""
    total = 0
    for row in tests:
        count = getattr(row.detail, "near_ties", None)
        if row.deciding and isinstance(count, int):
            total += count
    return total


def summary(frame: pd.DataFrame, alpha: float) -> list[tuple[str, int, int, float, float]]:
    """(what, k, n, rate, Clopper-Pearson 95% upper bound) for the verdict's FAIL, its
    INCONCLUSIVE, and each test named in a FAIL."""
    n = len(frame)
    out = []

    def line(what: str, k: int) -> None:
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        out.append((what, k, n, k / n, ci.high))

    failed = frame["failed"].astype("string").fillna("").str.split()
    line("verdict FAIL", int((frame["verdict"] == "FAIL").sum()))
    line("verdict INCONCLUSIVE", int((frame["verdict"] == "INCONCLUSIVE").sum()))
    names = sorted({t for cell in failed for t in cell})
    for name in names:
        line(f"  {name} failed", sum(name in cell for cell in failed))
    return out


def render(csv_path: Path, protocol: Path, alpha: float, markdown: bool) -> str:
    frame = pd.read_csv(csv_path, dtype={"failed": "string", "inconclusive": "string"})
    rows = summary(frame, alpha)
    per_run = frame["seconds"].median()
    head = (
        f"{protocol} on the real bundled engine: {len(frame)} null runs on disjoint seed "
        f"ranges (offsets {frame['offset'].min()}..{frame['offset'].max()}), device "
        f"{', '.join(sorted(set(map(str, frame['device']))))}, median {per_run:.1f} s per run; "
        f"stated alpha {alpha:g}"
    )
    if "source" in frame:
        carried = frame["source"].astype("string").fillna("run")
        for source, count in carried[carried != "run"].value_counts().items():
            head += f"; {count} PASS rows {source} (bench/calibration_carry.py)"
    if markdown:
        lines = [head, "", "| outcome | k / n | rate | 95% upper bound (Clopper-Pearson) |",
                 "| --- | --- | --- | --- |"]  # fmt: skip
        lines += [f"| {w.strip()} | {k} / {n} | {r:.4f} | {u:.4f} |" for w, k, n, r, u in rows]
        verdict_upper = rows[0][4]
        lines.append(
            f"\nVerdict false-fail upper bound {verdict_upper:.4f} "
            f"{'<=' if verdict_upper <= alpha else '>'} alpha {alpha:g}"
        )
        return "\n".join(lines) + "\n"
    table = Table()
    for col in ("outcome", "k / n", "rate", "95% upper (CP)"):
        table.add_column(col)
    for what, k, n, rate, upper in rows:
        table.add_row(what, f"{k} / {n}", f"{rate:.4f}", f"{upper:.4f}")
    console = Console(width=140, file=io.StringIO(), record=True)
    console.print(table)
    return head + "\n" + console.export_text()


def append_rows(path: Path, fieldnames: list[str], rows: list[dict]) -> None:
    """Append rows (the header first when the file is new), in the file's own columns."""
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def carry(args, digest: str, done: set[int], fieldnames: list[str]) -> set[int]:
    """Append --carry-from's PASS rows (bench/calibration_carry.py) to --out; their
    offsets."""
    from calibration_carry import carried_rows, carry_reason

    if args.carry_protocol is None:
        raise SystemExit("--carry-from needs --carry-protocol (the file its runs used)")
    source = carry_reason(args.carry_protocol, args.protocol)
    rows = carried_rows(args.carry_from, source, digest, done)
    if "source" not in fieldnames:
        raise SystemExit(f"{args.out} has no source column: carry into a new CSV")
    append_rows(args.out, fieldnames, rows)
    print(f"carried {len(rows)} PASS row(s) from {args.carry_from} ({source})", file=sys.stderr)
    return {row["offset"] for row in rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol", type=Path)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--offset-base", type=int, required=True, help="first run's --offset")
    ap.add_argument("--out", type=Path, required=True, help="CSV (one row per run, appended)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--resume", action="store_true", help="skip offsets already in --out")
    ap.add_argument("--stride", type=int, default=None, help="default: the seed span")
    ap.add_argument("--check-reuse", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument(
        "--offsets", default=None, help="comma-separated offsets to run instead of --runs"
    )
    ap.add_argument(
        "--carry-from",
        type=Path,
        default=None,
        help="CSV of runs of --carry-protocol "
        "whose PASS rows hold here (bench/calibration_carry.py); its other rows re-run",
    )
    ap.add_argument("--carry-protocol", type=Path, default=None)
    ap.add_argument(
        "--keep-failing", type=Path, default=None, help="folder for the archives of runs not PASS"
    )
    ap.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run only offsets r with r %% N == K (parallel processes appending to one CSV)",
    )
    args = ap.parse_args(argv)
    from specconform.protocol.load import load_protocol

    loaded = load_protocol(args.protocol)
    data, digest = loaded.data, loaded.hash[:12]
    alpha = float((data.get("verdict") or {}).get("alpha", data.get("alpha", 0.01)))
    stride = args.stride or seed_span(args.protocol)
    if args.out.exists() and not args.resume:
        raise SystemExit(f"{args.out} exists: pass --resume to continue it")
    done, fieldnames = set(), list(COLUMNS)
    if args.out.exists():
        old = pd.read_csv(args.out, dtype={"protocol_hash": "string"})
        done = set(old["offset"].astype(int))
        fieldnames = list(old.columns)  # an older CSV keeps its header
        hashes = set(old["protocol_hash"].dropna()) if "protocol_hash" in old else set()
        if hashes - {digest}:
            raise SystemExit(f"{args.out} holds runs of protocol {sorted(hashes)}, not {digest}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.carry_from is not None:
        done |= carry(args, digest, done, fieldnames)
    cache = EngineCache()
    shard, shards = (int(x) for x in args.shard.split("/"))
    if args.offsets:
        offsets = [int(float(x)) for x in args.offsets.split(",")]
    else:
        offsets = [args.offset_base + r * stride for r in range(args.runs)]
    offsets = [o for i, o in enumerate(offsets) if i % shards == shard]
    if args.check_reuse:
        first = offsets[0]
        _, a = one_run(args.protocol, first, args.device)
        _, b = one_run(args.protocol, first, args.device)  # the cached adapter
        cache.fresh()
        _, c = one_run(args.protocol, first, args.device)  # a fresh one again
        if not a == b == c:
            raise SystemExit("--check-reuse: a reused adapter changed the results: stop")
        print("check-reuse: fresh and reused adapters give identical results", file=sys.stderr)
    t0 = time.perf_counter()
    for i, offset in enumerate(offsets):
        if offset in done:
            continue
        row, _ = one_run(args.protocol, offset, args.device, args.keep_failing)
        row["protocol_hash"], row["source"] = digest, "run"
        append_rows(args.out, fieldnames, [row])
        print(
            f"run {i + 1}/{len(offsets)} offset {offset}: {row['verdict']} "
            f"{row['failed'] or ''} ({row['seconds']} s; {time.perf_counter() - t0:.0f} s in all)",
            file=sys.stderr,
            flush=True,
        )
    sys.stdout.write(render(args.out, args.protocol, alpha, args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
