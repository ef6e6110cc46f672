"""The verdict's false-fail rate of a shipped Monte Carlo protocol file, by replication.

A montecarlo protocol (protocols/montecarlo.yaml, protocols/peers/*.yaml) states a
family-wise alpha (Holm over its χ² tests). Its verdict's error rate is a property of
the file -- its cases, row count, cell pooling and decision rule -- under an exact
sampler. This bench runs the file as written (cases, seeds.count, tests, verdict) with
its sampler replaced by the bundled exact reference accept (`sampler.adapter: bundled`,
CPU torch), on N replications with disjoint seed offsets, through the kind's own
collector and evaluator (the code `run` and `verify` use), and prints the verdict's
false-fail count with its 95 % and 99 % Clopper-Pearson intervals. `--mutant` runs the
same with a planted kernel bug: the negative control (the verdict must fail).

For a peer file whose sampler runs only on a GPU (FlashInfer) or needs the peer installed
(vLLM, SGLang), the exact reference stands in: this measures the level of the protocol's
design (cases, rows, tests, α, combination rule), not the peer's correctness.

    .venv/bin/python bench/calibration_montecarlo.py protocols/peers/vllm.yaml \
        --replications 500 --out /tmp/vllm_null.csv
    .venv/bin/python bench/calibration_montecarlo.py protocols/peers/vllm.yaml \
        --replications 20 --mutant residual_from_p

Replication r uses seeds.offset = BASE + r (each offset keys its own PCG64 streams, so
replications are independent); BASE defaults to 10**6, far from the offsets the
shipped archives used. `--out` is written one row per finished replication; a rerun with
the same `--out` skips the offsets it already holds (resumable), and the summary covers
every row of the file that belongs to this run's offsets.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
from resumable import ResultCsv, join_list, run_resumable, split_list
from statsmodels.stats.proportion import proportion_confint

from specconform.adapters.kernel import load_kernel
from specconform.kinds.registry import kind_of
from specconform.protocol.load import load_protocol
from specconform.results import RawData
from specconform.util.progress import silent


@dataclass(frozen=True)
class Replication:
    offset: int
    verdict: str
    failed: tuple[str, ...]
    seconds: float


TABLE = ResultCsv[Replication](
    columns=["offset", "verdict", "failed", "seconds"],
    row_of=lambda r: [r.offset, r.verdict, join_list(r.failed), f"{r.seconds:.3f}"],
    parse=lambda r: Replication(int(r["offset"]), r["verdict"], split_list(r["failed"]),
                                float(r["seconds"])),
    key_of=lambda r: r.offset,
)  # fmt: skip


_STATE: dict = {}


def _init(path: str, mutant: str | None) -> None:
    loaded = load_protocol(Path(path))
    kind = kind_of(loaded.kind)
    if kind.capabilities.drives != "sampler":
        raise SystemExit(f"{path}: a {loaded.kind} protocol; this bench replicates kernel kinds")
    _STATE.update(loaded=loaded, kind=kind, kernel=load_kernel("bundled", "cpu", mutant),
                  collect=kind.collect.load())  # fmt: skip
    # statsmodels' multipletests (Holm, in every evaluation) calls gc.collect(), which
    # walks every object alive (torch's are many); freezing the ones loaded so far makes
    # it cheap. No result depends on it.
    gc.freeze()


def _one(offset: int) -> Replication:
    loaded, kind = _STATE["loaded"], _STATE["kind"]
    t0 = time.perf_counter()
    data = loaded.model.model_dump(mode="json")
    data["seeds"]["offset"] = offset
    data["sampler"]["adapter"] = "bundled"
    data["device"] = "cpu"
    model = type(loaded.model).model_validate(data)
    raw = _STATE["collect"](model, _STATE["kernel"], silent)
    evaluation = kind.evaluate_protocol(model.model_dump(mode="json"), RawData(raw))
    failed = tuple(t.test for t in evaluation.tests if t.deciding and not t.passed)
    return Replication(offset, evaluation.verdict.verdict, failed, time.perf_counter() - t0)


def replicate(path: Path, replications: int, base: int, mutant: str | None, *,
              workers: int = 1, out: Path | None = None) -> list[Replication]:  # fmt: skip
    def report(i: int, total: int, rep: Replication) -> None:
        print(
            f"[{i + 1}/{total}] offset {rep.offset}: {rep.verdict}"
            + (f" ({', '.join(rep.failed)})" if rep.failed else ""),
            flush=True,
        )

    return run_resumable([base + r for r in range(replications)], one=_one, init=_init,
                         init_args=(str(path), mutant), workers=workers, out=out, table=TABLE,
                         report=report)  # fmt: skip


def summary(path: Path, runs: list[Replication], stated_alpha: float) -> str:
    n = len(runs)
    fails = sum(r.verdict != "PASS" for r in runs)
    ci95 = proportion_confint(fails, n, alpha=0.05, method="beta")
    ci99 = proportion_confint(fails, n, alpha=0.01, method="beta")
    mean_s = sum(r.seconds for r in runs) / max(n, 1)
    return (
        f"| `{path}` | {n} | {fails} | {fails / n:.4f} | [{ci95[0]:.4f}, {ci95[1]:.4f}] | "
        f"[{ci99[0]:.4f}, {ci99[1]:.4f}] | {stated_alpha} | {mean_s:.2f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path)
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--base-offset", type=int, default=10**6)
    parser.add_argument("--mutant", default=None, help="a kernel mutant: the negative control")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", type=Path, default=None,
                        help="CSV of every replication (resumable: finished offsets are skipped)")  # fmt: skip
    args = parser.parse_args()
    t0 = time.perf_counter()
    runs = replicate(args.protocol, args.replications, args.base_offset, args.mutant,
                     workers=args.workers, out=args.out)  # fmt: skip
    alpha = load_protocol(args.protocol).data.get("verdict", {}).get("alpha")
    print(
        "| protocol | replications | verdict FAILs | rate | 95% Clopper-Pearson | "
        "99% Clopper-Pearson | stated alpha | per replication |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(summary(args.protocol, runs, alpha))
    print(f"wall time of this invocation: {time.perf_counter() - t0:.0f} s")
    if args.mutant:
        print(f"(negative control: --mutant {args.mutant}; every verdict should be FAIL)")


if __name__ == "__main__":
    main()
