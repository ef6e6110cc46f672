"""The verdict's error rate of a shipped sampled tree protocol file, by replication.

An exact file (protocols/tree_sampled.yaml, protocols/peers/sglang_tree_sampled.yaml)
states a family-wise alpha (Holm over its per-position χ² tests): this bench counts its
verdict's false FAILs under an exact sampler. A lossy file (protocols/tree_lossy.yaml,
protocols/peers/sglang_tree_lossy.yaml) states TV intervals simultaneous at 1 - alpha:
this bench counts the replications where some TV row's interval misses the exact TV of
its setting (the reference rule's law against the target law, computed exactly).
Both through the kind's own evaluator (the function `verify` recomputes with); 95 % and
99 % Clopper-Pearson intervals beside the stated alpha.

Samplers (`--sampler`):
- `law` (default): each case's rows drawn as Multinomial(seeds.count, exact law), the
  edge sweep's rows from one real collection (specconform/calibration/tree.py). Fast:
  the evaluator is the cost.
- `reference`: the file run as written through the tree runner's real collector with
  `tree_sampler.adapter: reference` on CPU (specconform's exact reference tree sampler;
  for an SGLang file it stands in for the CUDA kernel: this measures the protocol's
  design, not SGLang), seeds.offset = BASE + r. `--mutant` plants a tree bug: the
  negative control (an exact file's verdict must FAIL; a lossy file's intervals must
  miss the exact TV of the un-mutated rule).

    .venv/bin/python bench/calibration_tree.py protocols/tree_sampled.yaml \
        --replications 600 --out /tmp/tree_sampled_null.csv
    .venv/bin/python bench/calibration_tree.py protocols/tree_sampled.yaml \
        --sampler reference --replications 3 --mutant tree_residual_stale

Deterministic: `law` replication r draws from numpy.random.default_rng([SEED, r]);
`reference` replication r uses seeds.offset = BASE + r. `--out` gets one row per
finished replication; a rerun with the same `--out` skips those already there.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import time
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import pandas as pd
from resumable import ResultCsv, join_list, run_resumable, split_list
from statsmodels.stats.proportion import proportion_confint

from specconform.calibration.tree import (
    TreeReplication,
    is_lossy,
    judge,
    law_tables,
    replicate_law,
)
from specconform.kinds.registry import kind_of
from specconform.protocol.load import load_protocol
from specconform.runner.context import RunContext
from specconform.util.progress import silent

TABLE = ResultCsv[TreeReplication](
    columns=["replication", "verdict", "failed", "tv_rows", "missed", "seconds"],
    row_of=lambda r: [r.replication, r.verdict, join_list(r.failed), r.tv_rows,
                      join_list(r.missed), f"{r.seconds:.3f}"],
    parse=lambda r: TreeReplication(int(r["replication"]), r["verdict"], split_list(r["failed"]),
                                    int(r["tv_rows"]), split_list(r["missed"]),
                                    float(r["seconds"])),
    key_of=lambda r: r.replication,
)  # fmt: skip
_STATE: dict = {}


def _model(loaded, **changes):
    data = loaded.model.model_dump(mode="json")
    data["tree_sampler"]["adapter"] = "reference"
    data["device"] = "cpu"
    for key, value in changes.items():
        data["seeds"][key] = value
    return type(loaded.model).model_validate(data)


def _collect(loaded, model, mutant: str | None) -> pd.DataFrame:
    collect = kind_of("tree").collect.load()
    raw = collect(dataclasses.replace(loaded, model=model), mutant=mutant, progress=silent, log=lambda _m: None,
                  context=RunContext.standalone())  # fmt: skip
    return pd.read_csv(io.BytesIO(raw["raw/tree/counts.csv"]), dtype=str, keep_default_na=False)


def _init(path: str, sampler: str, seed: int, base: int, mutant: str | None) -> None:
    loaded = load_protocol(Path(path))
    if loaded.kind != "tree" or loaded.model.method != "sampled":
        raise SystemExit(f"{path}: not a sampled tree protocol (a grid file is deterministic)")
    protocol = loaded.model.model_dump(mode="json")
    _STATE.update(loaded=loaded, protocol=protocol, sampler=sampler, seed=seed, base=base,
                  mutant=mutant)  # fmt: skip
    if sampler == "law":
        # The edge sweep's rows do not depend on the seeds: one collection of one row a case.
        counts = _collect(loaded, _model(loaded, count=1), None)
        _STATE["edges"] = counts[counts["source"] == "edge"].astype({"count": "int64",
                                                                     "setting": "int64"})  # fmt: skip
        _STATE["tables"] = law_tables(protocol)
    # statsmodels' multipletests (Holm, in every evaluation) calls gc.collect(), which
    # walks every object alive; freezing the ones loaded so far makes it cheap. No result
    # depends on it.
    gc.freeze()


def _one(r: int) -> TreeReplication:
    protocol = _STATE["protocol"]
    if _STATE["sampler"] == "law":
        return replicate_law(
            protocol, _STATE["edges"], 1, _STATE["seed"], start=r, tables=_STATE["tables"]
        )[0]
    t0 = time.perf_counter()
    counts = _collect(_STATE["loaded"], _model(_STATE["loaded"], offset=_STATE["base"] + r),
                      _STATE["mutant"])  # fmt: skip
    counts = counts.astype({"count": "int64", "setting": "int64"})
    return judge(protocol, counts, r, time.perf_counter() - t0)


def run(path: Path, replications: int, *, sampler: str, seed: int, base: int,
        mutant: str | None, workers: int, out: Path | None) -> list[TreeReplication]:  # fmt: skip
    def report(i: int, total: int, rep: TreeReplication) -> None:
        if i % 50 == 0 or rep.failed and not rep.tv_rows or rep.missed:
            print(f"[{i + 1}/{total}] replication {rep.replication}: {rep.verdict}"
                  + (f" failed {', '.join(rep.failed)}" if rep.failed and not rep.tv_rows else "")
                  + (f" missed {', '.join(rep.missed)}" if rep.missed else ""), flush=True)  # fmt: skip

    return run_resumable(range(replications), one=_one, init=_init,
                         init_args=(str(path), sampler, seed, base, mutant), workers=workers,
                         out=out, table=TABLE, report=report)  # fmt: skip


def _ci(k: int, n: int, level: float) -> str:
    low, high = proportion_confint(k, n, alpha=1 - level, method="beta")
    return f"[{low:.4f}, {high:.4f}]"


def summary(path: Path, runs: list[TreeReplication], protocol: dict, sampler: str) -> str:
    n = len(runs)
    alpha = (protocol.get("verdict") or {}).get("alpha", protocol["alpha"])
    mean_s = sum(r.seconds for r in runs) / max(n, 1)
    if is_lossy(protocol):
        k = sum(not r.covered_all for r in runs)
        rows = sum(r.tv_rows for r in runs)
        row_misses = sum(len(r.missed) for r in runs)
        head = ("| protocol | sampler | replications | some TV interval misses the exact TV | "
                "rate | 95% CP | 99% CP | stated (1 - simultaneous confidence) | "
                "row misses / TV rows | per replication |")  # fmt: skip
        line = (
            f"| `{path}` | {sampler} | {n} | {k} | {k / n:.4f} | {_ci(k, n, 0.95)} | "
            f"{_ci(k, n, 0.99)} | {alpha} | {row_misses} / {rows} | {mean_s:.2f} s |"
        )
    else:
        k = sum(r.verdict != "PASS" for r in runs)
        head = ("| protocol | sampler | replications | verdict FAILs | rate | 95% CP | 99% CP | "
                "stated alpha | per replication |")  # fmt: skip
        line = (
            f"| `{path}` | {sampler} | {n} | {k} | {k / n:.4f} | {_ci(k, n, 0.95)} | "
            f"{_ci(k, n, 0.99)} | {alpha} | {mean_s:.2f} s |"
        )
    sep = "|" + " --- |" * (head.count("|") - 1)
    return "\n".join([head, sep, line])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path)
    parser.add_argument("--replications", type=int, default=600)
    parser.add_argument("--sampler", choices=("law", "reference"), default="law")
    parser.add_argument("--seed", type=int, default=20261207, help="law sampler's seed")
    parser.add_argument("--base-offset", type=int, default=10**6,
                        help="reference sampler: replication r runs seeds.offset BASE + r")  # fmt: skip
    parser.add_argument("--mutant", default=None,
                        help="a tree mutant (reference sampler only): the negative control")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", type=Path, default=None,
                        help="CSV of every replication (resumable: finished ones are skipped)")  # fmt: skip
    args = parser.parse_args()
    if args.mutant and args.sampler != "reference":
        parser.error("--mutant plants a bug in the reference sampler: add --sampler reference")
    t0 = time.perf_counter()
    runs = run(args.protocol, args.replications, sampler=args.sampler, seed=args.seed,
               base=args.base_offset, mutant=args.mutant, workers=args.workers, out=args.out)  # fmt: skip
    protocol = load_protocol(args.protocol).model.model_dump(mode="json")
    print(summary(args.protocol, runs, protocol, args.sampler
                  + (f", --mutant {args.mutant}" if args.mutant else "")))  # fmt: skip
    print(f"wall time of this invocation: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
