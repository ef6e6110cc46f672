"""Replications of a shipped tree protocol file on its exact law (issues 33/34).

A sampled tree protocol (``method: sampled``) states an error rate for its *verdict*:
Holm at alpha over its per-position χ² tests (an exact file), or simultaneous coverage
1 - alpha of its TV intervals (a ``max_tv`` file, Bonferroni over the TV rows). This
module measures both on replications, through the kind's own evaluator
(``kind.evaluate_protocol``, the function ``verify`` recomputes with).

The exact sampler here is the law itself: a case's ``seeds.count`` rows are i.i.d., so
the counts of its committed sequences are Multinomial(count, law), with the law
:func:`~specconform.kinds.tree.laws.target_law` (an exact file) or
:func:`~specconform.kinds.tree.laws.threshold_law` at each setting (a lossy file: the
reference sampler's rule, whose distance from the target law is known exactly). Each
committed sequence's path is the chain of first children carrying its accepted tokens,
which is where an exact sampler puts it. The edge sweep does not depend on the seeds, so
its rows come from one real collection (``edges``) and are reused by every replication.

Replication r draws from ``numpy.random.default_rng([seed, r])`` (disjoint streams).
This package sits below the adapters and the runner: the bench
(``bench/calibration_tree.py``) collects the edge rows and runs the real sampler when
asked (its ``--sampler reference`` mode and the negative controls).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specconform.details.tree import TreeTVDetail
from specconform.kinds.registry import kind_of
from specconform.kinds.tree.laws import SequenceLaw, Tree, target_law, threshold_law, tree_of
from specconform.results import Evaluation, RawData

COUNT_COLUMNS = ["setting", "source", "case", "tokens", "path", "count"]


@dataclass(frozen=True)
class TreeReplication:
    """One replication's verdict and, for a lossy file, its TV intervals' coverage."""

    replication: int
    verdict: str
    failed: tuple[str, ...]  # deciding tests that did not pass
    tv_rows: int  # TV rows (0 for an exact file)
    missed: tuple[str, ...]  # TV rows whose interval does not contain the exact TV
    seconds: float

    @property
    def covered_all(self) -> bool:
        return not self.missed


def is_lossy(protocol: dict) -> bool:
    return protocol.get("max_tv") is not None


def sampler_law(tree: Tree, setting: dict) -> SequenceLaw:
    """The law an exact sampler of this setting commits: the target law at thresholds
    (1, 1), the reference rule's law otherwise."""
    ts, ta = float(setting["threshold_single"]), float(setting["threshold_acc"])
    return target_law(tree) if (ts, ta) == (1.0, 1.0) else threshold_law(tree, ts, ta)


def exact_tv(tree: Tree, setting: dict, position: int) -> float:
    """TV between the setting's committed law and the target law at one position (the
    first position+1 tokens, shorter sequences whole): what a TV row estimates. Rows with
    the error flag are left out of the TV rows, so the sampler's law is conditioned on no
    error (the shipped lossy cases have none)."""
    law = sampler_law(tree, setting)
    valid = 1.0 - law.error
    mine = {k: v / valid for k, v in law.truncated(position + 1).items()}
    target = target_law(tree).truncated(position + 1)
    return 0.5 * sum(abs(mine.get(k, 0.0) - target.get(k, 0.0)) for k in set(mine) | set(target))


def _path_text(tree: Tree, seq: tuple[int, ...]) -> str:
    """Nodes of the accepted tokens (all but the last): the first child with each token."""
    node, nodes = 0, []
    for token in seq[:-1]:
        node = next(c for c in tree.children(node) if tree.tokens[c] == token)
        nodes.append(node)
    return " ".join(str(n) for n in nodes)


@dataclass(frozen=True)
class _Table:
    """A case's sequences at one setting, with their probabilities, tokens and paths."""

    tokens: list[str]
    paths: list[str]
    probs: np.ndarray


def law_tables(protocol: dict) -> dict[tuple[int, str], _Table]:
    out = {}
    for s, setting in enumerate(protocol["settings"]):
        for case in protocol["cases"]:
            tree = tree_of(case)
            law = sampler_law(tree, setting)
            seqs = sorted(law.probs)
            probs = np.array([law.probs[k] for k in seqs] + [law.error], np.float64)
            out[(s, case["name"])] = _Table(
                [" ".join(str(t) for t in k) for k in seqs] + ["error"],
                [_path_text(tree, k) for k in seqs] + [""],
                probs / probs.sum(),
            )
    return out


def law_counts(protocol: dict, tables: dict, rng: np.random.Generator) -> pd.DataFrame:
    """The ``sampled`` rows of one replication: Multinomial(seeds.count, law) per
    setting and case, in the runner's counts layout."""
    n = int(protocol["seeds"]["count"])
    frames = []
    for (s, name), table in tables.items():
        counts = rng.multinomial(n, table.probs)
        keep = counts > 0
        frames.append(pd.DataFrame({
            "setting": s, "source": protocol["method"], "case": name,
            "tokens": np.asarray(table.tokens)[keep], "path": np.asarray(table.paths)[keep],
            "count": counts[keep],
        }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)[COUNT_COLUMNS]


def raw_of(protocol: dict, counts: pd.DataFrame) -> RawData:
    """Raw files as the tree runner writes them (so the evaluator reads them as from
    an archive)."""
    buf = io.StringIO()
    counts.to_csv(buf, index=False, lineterminator="\n")
    grids = {c["name"]: c["grid"] for c in protocol["cases"]}
    return RawData({
        "raw/tree/counts.csv": buf.getvalue().encode(),
        "raw/tree/grid.json": json.dumps(grids, sort_keys=True).encode(),
    })  # fmt: skip


def tv_misses(protocol: dict, evaluation: Evaluation) -> tuple[int, tuple[str, ...]]:
    """(TV rows, rows whose stated interval misses the exact TV of their setting)."""
    trees = {c["name"]: tree_of(c) for c in protocol["cases"]}
    rows, missed = 0, []
    for t in evaluation.tests:
        d = t.detail
        if not isinstance(d, TreeTVDetail):
            continue
        rows += 1
        truth = exact_tv(trees[d.case], protocol["settings"][d.setting], d.position)
        # The interval is computed in float64 from counts; 1e-12 absorbs the rounding of
        # the exact TV's sum (a miss by less is no miss).
        if not d.lower - 1e-12 <= truth <= d.upper + 1e-12:
            missed.append(t.test)
    return rows, tuple(missed)


def judge(protocol: dict, counts: pd.DataFrame, replication: int, seconds: float
          ) -> TreeReplication:  # fmt: skip
    """Evaluate one replication's counts with the kind's evaluator and record it."""
    t0 = time.perf_counter()
    evaluation = kind_of("tree").evaluate_protocol(protocol, raw_of(protocol, counts))
    failed = tuple(t.test for t in evaluation.tests if t.deciding and not t.passed)
    rows, missed = tv_misses(protocol, evaluation) if is_lossy(protocol) else (0, ())
    return TreeReplication(replication, evaluation.verdict.verdict, failed, rows, missed,
                           seconds + time.perf_counter() - t0)  # fmt: skip


def replicate_law(protocol: dict, edges: pd.DataFrame, replications: int, seed: int, *,
                  start: int = 0, tables: dict | None = None,
                  on_result: Callable[[TreeReplication], None] | None = None
                  ) -> list[TreeReplication]:  # fmt: skip
    """Replications start..start+replications-1 of the file on its exact law.

    ``protocol``: the validated protocol data (JSON form); ``edges``: the ``edge`` rows
    of a real collection of the same file (see the module docstring); ``tables``:
    :func:`law_tables` of the protocol, when the caller keeps them across calls."""
    if protocol["method"] != "sampled":
        raise ValueError("a grid tree protocol is deterministic: nothing to replicate")
    tables = law_tables(protocol) if tables is None else tables
    out = []
    for r in range(start, start + replications):
        t0 = time.perf_counter()
        rng = np.random.default_rng([seed, r])
        counts = pd.concat([edges[COUNT_COLUMNS], law_counts(protocol, tables, rng)],
                           ignore_index=True)  # fmt: skip
        rep = judge(protocol, counts, r, time.perf_counter() - t0)
        out.append(rep)
        if on_result is not None:
            on_result(rep)
    return out
