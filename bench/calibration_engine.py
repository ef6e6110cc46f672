"""Calibration proof (2): the clean engine through a distribution protocol over many
disjoint seed ranges; the verdict's FAIL rate must be consistent with its nominal rate.

Each replication r runs every group of the protocol on seeds ``base + r * stride + i``
(disjoint across replications, like fresh runs), evaluates with the protocol's own
evaluator, and records each test's outcome. Reference laws come from the same serial
replay as `specconform run`, cached per prefix across replications (they depend only on
the prefix). Prints a Markdown table: per test the rejection rate with its 99%
Clopper-Pearson interval, and the verdict's FAIL rate against its union bound.

    python bench/calibration_engine.py protocols/ci_gate.yaml --replications 100
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from specconform.adapters.engine import BundledEngine
from specconform.calibration import evaluate_frames, summarize, verdict_bound
from specconform.protocol.load import apply_overrides, load_protocol
from specconform.runner.distribution import (
    SAMPLE_COLUMNS,
    _records_frame,
    _sparse,  # the run's own sparse-law encoding
)


class CachedReference:
    """reference.json content grown prefix by prefix, each law replayed once."""

    def __init__(self, engine, model):
        self.engine, self.model = engine, model
        self.depths = sorted({g.draft_loops for g in model.groups if g.draft_loops})
        prompt = engine.prompt
        self.ref = {
            "vocab_size": engine.vocab_size,
            "prompt": prompt,
            "p_t2": {},
            "p_t3": {},
            "q_t2": {str(d): {} for d in self.depths},
            "p_t1": _sparse(engine.target_law(prompt)),
        }

    def cover(self, samples: pd.DataFrame) -> dict:
        prompt = self.engine.prompt
        for t1 in sorted(set(int(t) for t in samples["t1"] if t >= 0)):
            if str(t1) not in self.ref["p_t2"]:
                self.ref["p_t2"][str(t1)] = _sparse(self.engine.target_law(prompt + [t1]))
                for d in self.depths:
                    self.ref["q_t2"][str(d)][str(t1)] = _sparse(
                        self.engine.draft_law(prompt + [t1], d)
                    )
        for t1, t2 in sorted(
            {
                (int(a), int(b))
                for a, b in zip(samples["t1"], samples["t2"], strict=False)
                if a >= 0 and b >= 0
            }
        ):
            key = f"{t1},{t2}"
            if key not in self.ref["p_t3"]:
                self.ref["p_t3"][key] = _sparse(self.engine.target_law(prompt + [t1, t2]))
        return self.ref


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--replications", type=int, default=100)
    ap.add_argument("--base", type=int, default=10_000_000, help="first seed")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    loaded = apply_overrides(load_protocol(args.protocol), {"--device": args.device})
    model, protocol = loaded.model, loaded.data
    engine = BundledEngine(model.engine, mutant=None, log=lambda line: None)
    reference = CachedReference(engine, model)
    stride = 2 * max(g.seed_offset for g in model.groups) + 10 * model.seeds.count
    rows, t0 = [], time.perf_counter()
    for r in range(args.replications):
        frames = []
        for g in model.groups:
            start = args.base + r * stride + g.seed_offset
            seeds = list(range(start, start + model.seeds.count))
            frames.append(_records_frame(g, engine.run_group(g, seeds)))
        samples = pd.concat(frames, ignore_index=True)[list(SAMPLE_COLUMNS)]
        ev = evaluate_frames(protocol, samples, reference.cover(samples))
        for t in ev.tests:
            rejected = t.passed is False or (
                t.passed is None and t.pvalue is not None and t.pvalue < model.alpha
            )
            rows.append((r, t.test, t.role, t.pvalue, t.passed, rejected, ev.verdict.verdict))
        print(
            f"replication {r + 1}/{args.replications}: {ev.verdict.verdict} "
            f"{list(ev.verdict.failed)} ({time.perf_counter() - t0:.0f}s)",
            file=sys.stderr,
            flush=True,
        )
    runs = pd.DataFrame(
        rows, columns=["replication", "test", "role", "pvalue", "passed", "rejected", "verdict"]
    )
    summary = summarize(runs, model.alpha)
    bound = verdict_bound(protocol)
    lines = [
        f"### Clean engine through `{args.protocol}`: {args.replications} disjoint seed "
        f"ranges x {model.seeds.count} seeds per group, alpha = {model.alpha}\n",
        "| test | role | rejections | rate | 99 % Clopper-Pearson |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in summary.itertuples():
        lines.append(
            f"| {s.test} | {s.role} | {s.rejections}/{s.replications} | "
            f"{s.rate:.3f} | [{s.ci_low:.3f}, {s.ci_high:.3f}] |"
        )
    verdict = summary.set_index("test").loc["VERDICT"]
    lines.append(
        f"\nVerdict FAIL rate {verdict.rate:.3f} (99% CI [{verdict.ci_low:.3f}, "
        f"{verdict.ci_high:.3f}]) against the union bound {bound:g}: "
        f"{'consistent' if verdict.ci_low <= bound else 'NOT consistent'}."
    )
    lines.append(f"(wall time {time.perf_counter() - t0:.0f} s, device {model.engine.device})")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
