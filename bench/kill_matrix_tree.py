"""Kill matrix of the planted tree bugs (issue 34; docs/kill-matrix.md, "Tree").

For every tree mutant: which rows of the grid protocol (protocols/tree.yaml,
deterministic) fail, and the fewest rows per case of the sampled protocol
(protocols/tree_sampled.yaml, alpha 0.01 Holm) that kill it, on a ladder of seed counts,
at several seed offsets (the largest over the offsets is the measured requirement).
Also the clean reference sampler's verdict at every rung (it must PASS).

    .venv/bin/python bench/kill_matrix_tree.py [--offsets 0 1000000 2000000] [--json F]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)

from engine_under_test.mutants import list_mutants
from specconform.protocol.schema import SeedPlan
from tests.toolkit.tree_helpers import run_tree

LADDER = (25, 50, 100, 250, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000)


def _seeds(count: int, offset: int):
    def edit(model):
        return model.model_copy(update={"seeds": SeedPlan(count=count, offset=offset)})

    return edit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--offsets", type=int, nargs="+", default=[0, 1_000_000, 2_000_000])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for mutant in [None] + [m.name for m in list_mutants("tree")]:
        grid, _ = run_tree("tree", mutant=mutant)
        grid_failed = [t.test for t in grid.tests if t.status == "FAIL"]
        needed, needed_gof, first_rows = [], [], []
        for offset in args.offsets:
            first = first_gof = None
            for count in LADDER:
                ev, _ = run_tree("tree_sampled", mutant=mutant, edit=_seeds(count, offset))
                failed = [t.test for t in ev.tests if t.status == "FAIL"]
                if failed and first is None:
                    first = count
                    first_rows.append(failed)
                if any("_pos" in t for t in failed):  # a chi-square row, not a rule
                    first_gof = count
                    break
            needed.append(first)
            needed_gof.append(first_gof)
        row = {"mutant": mutant or "(none: reference)", "grid": grid.verdict.verdict,
               "grid_failed": grid_failed, "sampled_first_fail": needed,
               "sampled_first_rows": first_rows[:1], "sampled_first_chi2_fail": needed_gof}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| mutant | grid (tree.yaml) | rows failing | sampled: rows per case to FAIL "
        f"(offsets {', '.join(map(str, args.offsets))}) | ... by a chi-square row |"
    )
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        need = ", ".join("never" if n is None else f"{n:,}" for n in r["sampled_first_fail"])
        gof = ", ".join("never" if n is None else f"{n:,}" for n in r["sampled_first_chi2_fail"])
        print(
            f"| {r['mutant']} | {r['grid']} | {', '.join(r['grid_failed']) or '-'} | {need} "
            f"| {gof} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
