"""Kill matrix: run a distribution protocol once clean and once per planted bug, and
report which tests each bug fails and how many seeds each test family needs.

Seeds needed are estimated from the observed effect: for an aggregated Pearson test with
statistic X on df degrees of freedom from n samples, the per-sample noncentrality is
w = max(X - df, 0) / n, and the seeds needed for power 0.99 at alpha are the smallest N
with P(ncx2(df, N w) > chi2.ppf(1 - alpha, df)) >= 0.99 (scipy.stats). An estimate, not
a guarantee: it assumes the strata keep their shares and the effect is real.

    python bench/kill_matrix.py protocols/ci_gate.yaml --out docs/kill-matrix-ci_gate.md
    python bench/kill_matrix.py protocols/fp32_t2.yaml --seeds 5000 --offset 2e6 --device cuda
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

from specconform.protocol.load import apply_overrides, exact_int, load_protocol
from specconform.runner.execute import execute

LAW_CHANGING = ["greedy_draft", "target_default_params", "draft_raw_q", "residual_inplace",
                "no_draft_probs", "bonus_params", "bf16_q", "shared_rng", "async_stale_input",
                "residual_from_p", "bonus_off_by_one", "shared_uniform"]
FAMILIES = {"t2 marginal": ("t2_gof", "t2_homogeneity"), "mechanism": ("joint", "acceptance")}


def seeds_needed(statistic, df, n, alpha, power=0.99) -> float | None:
    if statistic is None or df is None or not df or n <= 0:
        return None
    w = max(statistic - df, 0.0) / n
    if w <= 0:
        return float("inf")
    crit = stats.chi2.ppf(1 - alpha, df)
    lo, hi = 1.0, 1.0
    while stats.ncx2.sf(crit, df, hi * w) < power:
        hi *= 2
        if hi > 1e12:
            return float("inf")
    while hi - lo > 1:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if stats.ncx2.sf(crit, df, mid * w) >= power else (mid, hi)
    return hi


def _fmt_n(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    return "∞" if x == float("inf") else f"{int(x):,}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--offset", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--mutants", nargs="*", default=LAW_CHANGING)
    ap.add_argument("--no-clean", action="store_true",
                    help="skip the clean run (when the mutants are split across processes)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    loaded = load_protocol(args.protocol)
    loaded = apply_overrides(loaded, {
        "--seeds": exact_int(args.seeds, "--seeds") if args.seeds else None,
        "--offset": exact_int(args.offset, "--offset") if args.offset else None,
        "--device": args.device})
    group_n = loaded.model.seeds.count
    from specconform.progress import progress

    kinds = {t.name: t.type for t in loaded.model.tests}
    lines = [f"### Kill matrix: `{args.protocol}` ({group_n} seeds per group, "
             f"alpha = {loaded.model.alpha})\n",
             "| mutant | verdict | deciding tests failed | mechanism tests failed | "
             "t2 marginal: min seeds needed | mechanism: min seeds needed | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        for mutant in ([] if args.no_clean else [None]) + list(args.mutants):
            t0 = time.perf_counter()
            out = execute(loaded, out_dir=Path(tmp) / (mutant or "clean"),
                          argv=["kill_matrix"], mutant=mutant, key=None, sign=False,
                          progress=progress, run_context={"out_dir": Path(tmp) / "x"})
            ev = out.evaluation
            alpha = loaded.model.alpha
            failed = ", ".join(ev.verdict.failed) or "—"
            mech = ", ".join(t.test for t in ev.tests if kinds.get(t.test) in
                             FAMILIES["mechanism"] and t.passed is False) or "—"
            need = {}
            for family, types in FAMILIES.items():
                # Samples needed, scaled to seeds per group by the share of the group's
                # seeds the test used (strata below min_samples are not tested).
                # Only failed tests measure an effect; a family with none failed is
                # reported as not detected (an estimate from noise would mislead).
                values = [(seeds_needed(t.statistic, t.df, t.n, alpha), t.n) for t in ev.tests
                          if kinds.get(t.test) in types and t.passed is False]
                values = [v * group_n / n for v, n in values if v is not None and n]
                need[family] = min(values) if values else f"not detected at {group_n:,}"
            lines.append(f"| {mutant or '(clean)'} | {ev.verdict.verdict} | {failed} | {mech} "
                         f"| {_fmt_n(need['t2 marginal'])} | {_fmt_n(need['mechanism'])} "
                         f"| {time.perf_counter() - t0:.0f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
