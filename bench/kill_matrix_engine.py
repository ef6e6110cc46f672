"""One engine run per planted bug through a distribution protocol: which tests each
bug fails at the protocol's size (a smoke of the bundled engine's mutants, including
those whose law bench/kill_matrix.py cannot derive). One run is one draw of a random
verdict: it states no power and no seeds needed — those come from exact laws and
replications in bench/kill_matrix.py (docs/kill-matrix.md).

    python bench/kill_matrix_engine.py protocols/ci_gate.yaml
    python bench/kill_matrix_engine.py protocols/fp32_t2.yaml --seeds 5000 --offset 3e6 --device cuda
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from report_out import write_report  # noqa: E402

from specconform.protocol.load import apply_overrides, exact_int, load_protocol
from specconform.runner.execute import execute

# The engine's law-changing planted bugs this bench runs by default: the first-position
# engine mutants (no fault, none of the deep block) and the kernel ones. The engine
# names repeat tests/engine/test_mutants_registry.py's ENGINE on purpose: that test pins
# the registry by hand, and this list is the bench's own choice of what to run.
LAW_CHANGING = [
    "greedy_draft",
    "target_default_params",
    "draft_raw_q",
    "residual_inplace",
    "no_draft_probs",
    "bonus_params",
    "bf16_q",
    "shared_rng",
    "async_stale_input",
    "residual_from_p",
    "bonus_off_by_one",
    "shared_uniform",
]
FAMILIES = {"t2 marginal": ("t2_gof", "t2_homogeneity"), "mechanism": ("joint", "acceptance")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--offset", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--mutants", nargs="*", default=LAW_CHANGING)
    ap.add_argument(
        "--no-clean",
        action="store_true",
        help="skip the clean run (when the mutants are split across processes)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    loaded = load_protocol(args.protocol)
    loaded = apply_overrides(
        loaded,
        {
            "--seeds": exact_int(args.seeds, "--seeds") if args.seeds else None,
            "--offset": exact_int(args.offset, "--offset") if args.offset else None,
            "--device": args.device,
        },
    )
    group_n = loaded.model.seeds.count
    from specconform.util.progress import progress

    kinds = {t.name: t.type for t in loaded.model.tests}
    lines = [
        f"### One engine run per bug: `{args.protocol}` ({group_n} seeds per group, "
        f"alpha = {loaded.model.alpha})\n",
        "| mutant | verdict | deciding tests failed | mechanism tests failed | wall s |",
        "| --- | --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for mutant in ([] if args.no_clean else [None]) + list(args.mutants):
            t0 = time.perf_counter()
            out = execute(
                loaded,
                out_dir=Path(tmp) / (mutant or "clean"),
                argv=["kill_matrix"],
                mutant=mutant,
                key=None,
                sign=False,
                progress=progress,
            )
            ev = out.evaluation
            failed = ", ".join(ev.verdict.failed) or "—"
            mech = (
                ", ".join(
                    t.test
                    for t in ev.tests
                    if kinds.get(t.test) in FAMILIES["mechanism"] and t.passed is False
                )
                or "—"
            )
            lines.append(
                f"| {mutant or '(clean)'} | {ev.verdict.verdict} | {failed} | {mech} "
                f"| {time.perf_counter() - t0:.0f} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    return write_report(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
