"""Calibration of the shipped distribution protocols from exact laws (no engine).

For each protocol file (default: every distribution-kind protocol in protocols/ with a
known exact-law reference), draws replications of samples from exact laws for the
protocol's own groups and seed count, runs the real evaluator with the protocol's own
tests and decision rule, and writes Markdown: each test's and the verdict's false-fail
rate with a 99 % Clopper-Pearson interval, and NIST-style second-level checks (KS and
10-bin χ² uniformity of the p-values across replications, proportion passing).

Exact laws (REFERENCES below), each replaying every possible prefix through the
protocol's own engine (bench/calibration_make_reference.py): ci_gate's tiny preset on
CPU, fp32_t2's small preset on an H200, smollm2_t2's real model in the bundled engine and
hf_smollm2's in transformers (both CPU).

    .venv/bin/python bench/calibration_reference.py --replications 1000 --workers 2 \
        --out /tmp/calibration.md
    # the heavy part elsewhere (numpy/scipy/pandas only), summarised here:
    .venv/bin/python bench/calibration_reference.py protocols/ci_gate.yaml --job-out /tmp/j
    python3 bench/calibration_reference.py --job /tmp/j/ci_gate.json --runs-out runs.csv
    .venv/bin/python bench/calibration_reference.py protocols/ci_gate.yaml --from-runs runs.csv
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from _checkout import ROOT
from statsmodels.stats.proportion import proportion_confint

from specconform.calibration import (
    deciding_tests,
    load_reference,
    replicate,
    second_level,
    stated_verdict_rate,
    summarize,
    verdict_bound,
    world_from_reference,
)

REFERENCES = {  # protocol name -> exact laws (relative to the repository root)
    "ci_gate": "bench/reference/ci_gate-tiny.json",
    # every prefix replayed on an H200 (calibration_make_reference.py --device cuda)
    "fp32_t2": "bench/reference/fp32_t2-small.json",
    # the real model on CPU: the bundled engine's laws, and transformers' own
    "smollm2_t2": "bench/reference/smollm2_t2.json",
    "hf_smollm2": "bench/reference/hf_smollm2.json",
}
_STATE: dict = {}


def load(path: str, reference: str | None = None) -> dict:
    """A job: validated protocol data, its hash and the exact laws."""
    from specconform.protocol.load import load_protocol

    loaded = load_protocol(path)
    data = loaded.data
    ref_path = reference or REFERENCES.get(data["name"])
    if ref_path is None:
        raise SystemExit(
            f"error: no exact-law reference known for {data['name']!r}; pass --reference"
        )
    ref = load_reference(ROOT / ref_path if not Path(ref_path).is_absolute() else ref_path)
    return {
        "path": str(path),
        "hash": loaded.hash,
        "protocol": data,
        "reference": ref,
        "reference_path": str(ref_path),
    }


def _init(job: dict) -> None:
    _STATE["job"], _STATE["world"] = job, world_from_reference(job["reference"])


def _chunk(args) -> pd.DataFrame:
    start, count, seed, mutant = args
    return replicate(
        _STATE["world"], _STATE["job"]["protocol"], count, seed, mutant=mutant, start=start
    )


def run(
    job: dict, replications: int, seed: int, workers: int, mutant: str | None = None
) -> pd.DataFrame:
    """Replications 0..n-1 (deterministic: r draws from default_rng([seed, r]))."""
    size = max(1, -(-replications // (4 * max(workers, 1))))
    jobs = [(s, min(size, replications - s), seed, mutant) for s in range(0, replications, size)]
    if workers <= 1:
        _init(job)
        return pd.concat(map(_chunk, jobs), ignore_index=True)
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(job,)) as pool:
        return pd.concat(pool.map(_chunk, jobs), ignore_index=True)


def calibration_tables(job: dict, runs: pd.DataFrame, seed: int) -> str:
    protocol = job["protocol"]
    alpha = float(protocol["alpha"])
    deciding = {t["name"] for t in deciding_tests(protocol)} | {"out_of_support"}
    summary = summarize(runs, alpha)
    nist = {s.test: s for s in second_level(runs, alpha)}
    reps = int(runs["replication"].nunique())
    stated, bound = stated_verdict_rate(protocol), verdict_bound(protocol)
    head = (
        f"### `{job['path']}` (hash {job['hash'][:12]}): {reps} replications x "
        f"{protocol['seeds']['count']} seeds per group, alpha = {alpha}, seed {seed}\n\n"
        f"Exact laws: `{job['reference_path']}`. Rejection = the row's passed is False "
        "(exploratory rows: p < alpha). Proportion passing: NIST range "
        "(1 - alpha) +/- 3 sqrt(alpha (1 - alpha) / m). KS / chi2: uniformity of the "
        "p-values (10 bins).\n"
    )
    # A deciding row fails the verdict only after Holm's adjustment, so its false fails
    # run near alpha/m, not alpha: its own size is the rate of raw p < alpha.
    raw = runs.assign(raw=runs["pvalue"] < alpha).groupby("test")["raw"].agg(["sum", "size"])
    lines = [
        head,
        "| test | role | deciding | false fails (in the verdict) | 99 % Clopper-Pearson "
        "| raw p < alpha [99 % CP] | alpha in CI (raw) "
        "| proportion passing [NIST range] | KS p | chi2 p |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary.itertuples():
        if r.test in ("coverage", "VERDICT"):
            continue
        s = nist.get(r.test)
        second = (
            (
                f"{s.proportion:.4f} [{s.range_low:.4f}, {s.range_high:.4f}]"
                f"{'' if s.proportion_ok else ' **out**'} | {s.ks_pvalue:.3g} | "
                f"{s.chi2_pvalue:.3g}"
            )
            if s
            else "— | — | —"
        )
        spec = next((t for t in protocol["tests"] if t["name"] == r.test), {})
        k, m = (int(raw.loc[r.test, "sum"]), int(raw.loc[r.test, "size"]))
        lo, hi = proportion_confint(k, m, alpha=0.01, method="beta")
        raw_cell = f"{k}/{m} = {k / m:.4f} [{lo:.4f}, {hi:.4f}]"
        if r.test in ("out_of_support", "engine_errors"):
            inside, raw_cell = "0 expected", "—"
        elif spec.get("type") == "t1_gof" and len(spec.get("groups", ())) > 1:
            # Bonferroni over seed-sharing groups: nominal rate <= alpha, not = alpha.
            inside = f"<= alpha: {'yes' if lo <= alpha else '**NO**'}"
        else:
            inside = "yes" if lo <= alpha <= hi else "**NO**"
        lines.append(
            f"| {r.test} | {r.role} | {'yes' if r.test in deciding else ''} | "
            f"{r.rejections}/{r.replications} = {r.rate:.4f} | "
            f"[{r.ci_low:.4f}, {r.ci_high:.4f}] | {raw_cell} | {inside} | {second} |"
        )
    v = summary.set_index("test").loc["VERDICT"]
    ok = v.ci_low <= stated <= v.ci_high
    lines.append(
        f"| **verdict FAIL** | verdict | | {v.rejections}/{v.replications} = "
        f"{v.rate:.4f} | [{v.ci_low:.4f}, {v.ci_high:.4f}] | stated {stated:g}: "
        f"| {'inside' if ok else '**outside**'} | union bound {bound:g} | | |"
    )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "protocols", nargs="*", help="default: every protocol with a reference in REFERENCES"
    )
    ap.add_argument("--reference", default=None, help="reference.json or archive (.zip)")
    ap.add_argument("--replications", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20260514, help="simulation seed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--mutant", default=None, help="engine-free wrong sampler (power side)")
    ap.add_argument("--job-out", default=None, help="write job JSON files here and stop")
    ap.add_argument("--job", default=None, help="run one job JSON (no pydantic needed)")
    ap.add_argument("--runs-out", default=None, help="save per-replication rows (CSV)")
    ap.add_argument("--from-runs", default=None, help="summarise saved rows instead")
    ap.add_argument("--out", default=None, help="write the Markdown here (default stdout)")
    args = ap.parse_args(argv)

    if args.job:
        job = json.loads(Path(args.job).read_text())
        t0 = time.perf_counter()
        runs = run(job, args.replications, args.seed, args.workers, args.mutant)
        runs.to_csv(args.runs_out or sys.stdout, index=False)
        print(
            f"{job['protocol']['name']}: {args.replications} replications in "
            f"{time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        return 0
    paths = args.protocols or [f"protocols/{name}.yaml" for name in REFERENCES]
    parts = []
    for path in paths:
        job = load(path, args.reference)
        if job["protocol"]["kind"] != "distribution":
            raise SystemExit(f"error: {path} is not a distribution protocol")
        if args.job_out:
            Path(args.job_out).mkdir(parents=True, exist_ok=True)
            out = Path(args.job_out) / f"{job['protocol']['name']}.json"
            out.write_text(json.dumps(job))
            print(f"wrote {out}")
            continue
        t0 = time.perf_counter()
        if args.from_runs:
            runs = pd.read_csv(args.from_runs)
        else:
            runs = run(job, args.replications, args.seed, args.workers, args.mutant)
            if args.runs_out:
                runs.to_csv(args.runs_out, index=False)
        tail = (
            f"(summarised from {args.from_runs})"
            if args.from_runs
            else f"(wall time {time.perf_counter() - t0:.0f} s, {args.workers} workers)"
        )
        parts.append(calibration_tables(job, runs, args.seed) + f"\n{tail}\n")
    if parts:
        text = "\n".join(parts)
        Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
