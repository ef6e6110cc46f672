"""Tree evaluation (torch-free): from the runner's counts to tests and a verdict.

Per threshold setting and case:

- ``structure`` (deterministic): every row's accepted path is a chain of children from
  the root whose node tokens are the committed tokens; every committed token has positive
  target mass at the node it was drawn from and the final one is no refused child's
  token; no error flag (the laws are valid). Edge rows (uniforms at 0, CDF boundaries,
  just below 1) included.
- quadrature ``grid``: the grid law of whole committed sequences; each sequence is a box
  in the grid's axes (one interval per level it passes, one for the final draw), so its
  grid share is within axes/G of its exact probability for an exact interval-rule
  sampler; statistic max error / bound, PASS iff <= 1.
- montecarlo, exact (no ``max_tv``): at every position j, Pearson chi-square of the first
  j + 1 committed tokens (shorter sequences whole) against the target law; Holm over all.
- montecarlo, lossy (``max_tv``): at every position, the TV estimate and its interval
  (:mod:`specconform.stats.tv`) at simultaneous confidence 1 - alpha/m over the m TV rows
  (Bonferroni): PASS iff the upper end is at most max_tv. The interval carries the
  false-fail rate (<= alpha over the family), so the row decides without a p-value.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from specconform.details.tree import (
    TreeGofDetail,
    TreeGridDetail,
    TreeStructureDetail,
    TreeTVDetail,
)
from specconform.kinds.laws import as_exact
from specconform.kinds.tree.laws import Tree, position_cells, target_law, tree_of
from specconform.kinds.verdict import FamilyRule, deterministic_row, family_verdict
from specconform.results import FAIL, NO_EVIDENCE, PASS, Evaluation, RawData, TestRow
from specconform.stats import pearson_gof
from specconform.stats.tv import METHOD as TV_METHOD
from specconform.stats.tv import tv_interval

FLOAT_ALLOWANCE = 1e-6


def read_counts(raw: RawData) -> pd.DataFrame:
    frame = pd.read_csv(io.BytesIO(raw.bytes("raw/tree/counts.csv")), dtype=str,
                        keep_default_na=False)  # fmt: skip
    frame["count"] = frame["count"].astype(np.int64)
    frame["setting"] = frame["setting"].astype(np.int64)
    return frame


def _seq(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split()) if text else ()


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    counts = read_counts(raw)
    grids = raw.json("raw/tree/grid.json")
    alpha = float(protocol["alpha"])
    settings = protocol["settings"]
    lossy = protocol.get("max_tv") is not None
    trees = {case["name"]: tree_of(case) for case in protocol["cases"]}
    tests: list[TestRow] = []
    tv_rows = []  # (name, case, s, j, observed, target, outside) decided after counting m
    for s, setting in enumerate(settings):
        tag = "" if len(settings) == 1 else f"s{s}_"
        for case in protocol["cases"]:
            name, tree = case["name"], trees[case["name"]]
            mine = counts[(counts["setting"] == s) & (counts["case"] == name)]
            tests.append(_structure(f"{tag}{name}_structure", tree, name, s, mine, alpha))
            main = mine[mine["source"] == protocol["method"]]
            law = target_law(tree)
            if protocol["method"] == "grid":
                tests.append(_grid(f"{tag}{name}_grid", tree, name, s, main, law,
                                   int(grids[name])))  # fmt: skip
                continue
            valid = main[main["tokens"] != "error"]
            for j in range(tree.height + 1):
                cells = position_cells(law, j)
                keys = list(cells)
                observed = np.zeros(len(keys), np.int64)
                index = {k: i for i, k in enumerate(keys)}
                outside = 0
                for text, c in zip(valid["tokens"], valid["count"], strict=True):
                    key = _seq(text)[: j + 1]
                    if key in index:
                        observed[index[key]] += c
                    else:
                        outside += int(c)
                target = np.array([cells[k] for k in keys])
                row_name = f"{tag}{name}_pos{j}"
                if len(keys) == 1 and not lossy:
                    # One cell of mass 1 (p = 1 on a candidate): nothing to fit; any
                    # draw outside it is impossible under the exact law.
                    detail = TreeGofDetail(case=name, setting=s, position=j, cells=1,
                                           pooled=(), out_of_support=outside)  # fmt: skip
                    tests.append(deterministic_row(row_name, float(outside),
                                                   int(observed.sum()) + outside, alpha,
                                                   outside == 0, detail,
                                                   "none (one cell of mass 1)",
                                                   "out of support"))  # fmt: skip
                elif lossy:
                    tv_rows.append((row_name, name, s, setting, j, observed, target, outside))
                else:
                    tests.append(_gof(row_name, name, s, j, observed, target, outside,
                                      alpha, float(protocol["min_expected"])))  # fmt: skip
    if tv_rows:
        delta = alpha / len(tv_rows)
        for i, (row_name, name, s, setting, j, observed, target, outside) in enumerate(tv_rows):
            est = tv_interval(observed, target, outside, delta, seed=i)
            max_tv = float(protocol["max_tv"])
            ok = est.upper <= max_tv
            tv_detail = TreeTVDetail(case=name, setting=s, threshold_single=setting["threshold_single"],
                                  threshold_acc=setting["threshold_acc"], position=j,
                                  plugin=est.plugin, estimate=est.estimate, lower=est.lower,
                                  upper=est.upper, confidence=1.0 - delta, max_tv=max_tv,
                                  cells=est.cells, method=TV_METHOD)  # fmt: skip
            reason = "TV exceeds max_tv" if est.lower > max_tv else "TV may exceed max_tv"
            tests.append(deterministic_row(f"{row_name}_tv", est.estimate, est.n, alpha, ok,
                                           tv_detail, "none (simultaneous TV interval)", reason))  # fmt: skip
    rule = FamilyRule.from_protocol(protocol, ("primary",))
    rows, verdict = family_verdict(tests, rule)
    return Evaluation(rows, verdict)


def _gof(name, case, s, j, observed, target, outside, alpha, min_expected) -> TestRow:
    obs = np.append(observed, outside)
    res = pearson_gof(obs, np.append(target, 0.0), min_expected=min_expected)
    evidence = bool(np.isfinite(res.pvalue)) and res.df > 0 or res.out_of_support > 0
    status = NO_EVIDENCE if not evidence else (PASS if res.pvalue >= alpha else FAIL)
    detail = TreeGofDetail(case=case, setting=s, position=j, cells=int(res.cells),
                           pooled=tuple(int(i) for i in res.pooled),
                           out_of_support=int(res.out_of_support))  # fmt: skip
    return TestRow(name, "primary", float(res.statistic), float(res.df),
                   float(res.pvalue) if evidence else None, int(res.n), alpha,
                   status == PASS, detail, status=status, pvalue_method="chi2",
                   reason="" if evidence else "no evidence")  # fmt: skip


def _grid(name, tree: Tree, case, s, main, law, g) -> TestRow:
    axes = tree.height + 1
    cells = g**axes
    grid: dict[tuple, float] = {}  # committed sequence (or ("error",)) -> grid share
    for text, c in zip(main["tokens"], main["count"], strict=True):
        key: tuple = ("error",) if text == "error" else _seq(text)
        grid[key] = grid.get(key, 0.0) + c / cells
    # Every prefix (the first j+1 tokens, or a whole shorter sequence) is a box in the
    # grid's axes too: checking all prefixes catches a bias spread thinly over the
    # sequences that share one (a path sent into the wrong subtree).
    errors: dict[tuple, float] = {}  # (j, prefix) -> |grid - exact|
    for j in range(axes):
        exact_j, grid_j = law.truncated(j + 1), _truncated(grid, j + 1)
        for k in set(exact_j) | set(grid_j):
            errors[(j, k)] = abs(grid_j.get(k, 0.0) - exact_j.get(k, 0.0))
    keys = errors
    worst_key = max(errors, key=lambda k: errors[k])
    worst = worst_key[1]
    bound = axes / g + FLOAT_ALLOWANCE
    detail = TreeGridDetail(case=case, setting=s, grid=g, axes=axes, bound=bound,
                            max_abs_error=errors[worst_key],
                            worst_sequence=" ".join(str(t) for t in worst), sequences=len(keys))  # fmt: skip
    ok = errors[worst_key] <= bound
    return TestRow(name, "primary", errors[worst_key] / bound, None, None, cells, 0.0, ok, detail,
                   status=PASS if ok else FAIL, reason="" if ok else "bound exceeded",
                   pvalue_method="none (deterministic: exact law within the grid bound)")  # fmt: skip


def _truncated(law: dict, length: int) -> dict:
    out: dict = {}
    for seq, prob in law.items():
        key = seq if seq == ("error",) else seq[:length]
        out[key] = out.get(key, 0.0) + prob
    return out


def _structure(name, tree: Tree, case, s, mine, alpha) -> TestRow:
    bad_path = zero_mass = errors = rows = 0
    for text, path_text, c in zip(mine["tokens"], mine["path"], mine["count"], strict=True):
        rows += int(c)
        if text == "error":
            errors += int(c)
            continue
        tokens, path = _seq(text), _seq(path_text)
        if len(tokens) != len(path) + 1 or not _chain(tree, tokens, path):
            bad_path += int(c)
            continue
        if not _positive(tree, tokens, path):
            zero_mass += int(c)
    ok = bad_path == zero_mass == errors == 0
    detail = TreeStructureDetail(case=case, setting=s, rows=rows, bad_path=bad_path,
                                 zero_mass=zero_mass, errors=errors)  # fmt: skip
    reason = "engine errors" if errors else ("zero-mass commit" if zero_mass else "bad path")
    return deterministic_row(name, float(bad_path + zero_mass + errors), rows, alpha, ok,
                             detail, "none (deterministic)", reason)  # fmt: skip


def _chain(tree: Tree, tokens, path) -> bool:
    parent = 0
    for token, node in zip(tokens, path, strict=False):
        if not 0 < node < tree.nodes or tree.parents[node] != parent:
            return False
        if tree.tokens[node] != token:
            return False
        parent = node
    return True


def _positive(tree: Tree, tokens, path) -> bool:
    at = 0
    for token, node in zip(tokens, path, strict=False):
        if as_exact(tree.p[at])[token] <= 0:
            return False
        at = node
    last = tokens[-1]
    if not 0 <= last < tree.vocab or tree.p[at][last] <= 0:
        return False
    kids = tree.children(at)
    # A final token equal to a child's token after that child was refused: the residual
    # kept mass it must have removed (at a leaf there is no child).
    return not (kids and last in {tree.tokens[k] for k in kids})
