"""The verdict's false-fail rate of a shipped Monte Carlo protocol file, by replication.

A montecarlo protocol (protocols/montecarlo.yaml, protocols/peers/*.yaml) states a
family-wise alpha (Holm over its χ² tests). Its verdict's error rate is a property of
the file -- its cases, row count, cell pooling and decision rule -- under an exact
sampler. This bench runs the file as written (cases, seeds.count, tests, verdict) with
its sampler replaced by the bundled exact reference accept (`sampler.adapter: bundled`,
CPU torch), on N replications with disjoint seed offsets, through the kind's own
collector and evaluator (the code `run` and `verify` use), and prints the verdict's
false-fail count with its 95 % Clopper-Pearson interval. `--mutant` runs the same with a
planted kernel bug: the negative control (the verdict must fail).

    .venv/bin/python bench/calibration_montecarlo.py protocols/peers/vllm.yaml \
        --replications 500 --out /tmp/vllm_null.csv
    .venv/bin/python bench/calibration_montecarlo.py protocols/peers/vllm.yaml \
        --replications 20 --mutant residual_from_p

Replication r uses seeds.offset = BASE + r (each offset keys its own PCG64 streams, so
replications are independent); BASE defaults to 10**6, far from the offsets the
shipped archives used.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specconform.adapters.kernel import load_kernel  # noqa: E402
from specconform.kinds.registry import kind_of  # noqa: E402
from specconform.protocol.load import load_protocol  # noqa: E402
from specconform.results import RawData  # noqa: E402
from specconform.util.progress import silent  # noqa: E402


@dataclass(frozen=True)
class Replication:
    offset: int
    verdict: str
    failed: tuple[str, ...]
    seconds: float


def replicate(path: Path, replications: int, base: int, mutant: str | None) -> list[Replication]:
    loaded = load_protocol(path)
    kind = kind_of(loaded.kind)
    if kind.capabilities.drives != "sampler":
        raise SystemExit(f"{path}: a {loaded.kind} protocol; this bench replicates kernel kinds")
    kernel = load_kernel("bundled", "cpu", mutant)
    collect = kind.collect.load()
    out = []
    for r in range(replications):
        t0 = time.perf_counter()
        data = loaded.model.model_dump(mode="json")
        data["seeds"]["offset"] = base + r
        data["sampler"]["adapter"] = "bundled"
        data["device"] = "cpu"
        model = type(loaded.model).model_validate(data)
        raw = collect(model, kernel, silent)
        evaluation = kind.evaluate_protocol(model.model_dump(mode="json"), RawData(raw))
        failed = tuple(t.test for t in evaluation.tests if t.deciding and not t.passed)
        out.append(
            Replication(base + r, evaluation.verdict.verdict, failed, time.perf_counter() - t0)
        )
        print(
            f"[{r + 1}/{replications}] offset {base + r}: {evaluation.verdict.verdict}"
            + (f" ({', '.join(failed)})" if failed else ""),
            flush=True,
        )
    return out


def summary(path: Path, runs: list[Replication], stated_alpha: float) -> str:
    n = len(runs)
    fails = sum(r.verdict != "PASS" for r in runs)
    low, high = proportion_confint(fails, n, alpha=0.05, method="beta")
    mean_s = sum(r.seconds for r in runs) / max(n, 1)
    return (
        f"| `{path}` | {n} | {fails} | {fails / n:.4f} | [{low:.4f}, {high:.4f}] | "
        f"{stated_alpha} | {mean_s:.2f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path)
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--base-offset", type=int, default=10**6)
    parser.add_argument("--mutant", default=None, help="a kernel mutant: the negative control")
    parser.add_argument("--out", type=Path, default=None, help="CSV of every replication")
    args = parser.parse_args()
    runs = replicate(args.protocol, args.replications, args.base_offset, args.mutant)
    if args.out is not None:
        with open(args.out, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["offset", "verdict", "failed", "seconds"])
            for r in runs:
                writer.writerow([r.offset, r.verdict, ";".join(r.failed), f"{r.seconds:.3f}"])
    alpha = load_protocol(args.protocol).data.get("verdict", {}).get("alpha")
    print(
        "| protocol | replications | verdict FAILs | rate | 95% Clopper-Pearson | "
        "stated alpha | per replication |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(summary(args.protocol, runs, alpha))
    if args.mutant:
        print(f"(negative control: --mutant {args.mutant}; every verdict should be FAIL)")


if __name__ == "__main__":
    main()
