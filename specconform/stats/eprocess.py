"""An anytime-valid test for distribution protocols: a test martingale per group, seed by
seed, on a likelihood ratio against a predictable (plug-in) alternative.

Each observation of a group is a cell with an exact null probability: t1 against p_t1,
then for a nospec group t2 against p_t2[t1], and for a speculative group the joint cell
(accepted?, t2) against min(p, q) / (p − q)₊ (so acceptance and the committed law are
both seen). The factor of an observation x in stratum s is q̂(x) / p0(x), where q̂ is the
Dirichlet-mixture predictive (prior centred on p0, KT's total mass ½ C) from the
stratum's *earlier* observations over the cells where p0 > 0: under the null E[q̂(x)/p0(x) | past] = Σ p0 q̂ / p0 = 1, so
the running product E_n is a test martingale and, by Ville's inequality,
P(sup_n E_n ≥ 1/α) ≤ α: the verdict may be checked after every seed. An observation with
p0(x) = 0 (an impossible token, or a t2 that was not generated) makes E infinite (an
impossible token fails at once, as in the fixed-N tests).

The laws are the run's own exact reference (:class:`ExactLaws`: the parsed
``raw/reference.json`` of :class:`specconform.stats.reference.Reference`, the
laws the fixed-N evaluator uses); only the prefixes that were observed need a law.

Combination: groups that share seeds (e.g. sync and async, or all speculative groups
that share t1) are arbitrarily dependent, so their e-processes are *averaged* (a mean of
martingales on one filtration is one); families on disjoint seeds are independent and
their e-processes multiply. Numpy/pandas only.

Batches (``specconform run --sequential``): the run looks at the e-process after each
batch of seeds and stops at the first batch in which sup_n E_n reached 1/α; Ville bounds
the sup over *every* n, so looking only at batch ends (or stopping anywhere) keeps the
false-fail rate ≤ α. :func:`stopping_point` is that rule, shared by the runner (when to
stop) and the evaluator (that an archive stopped where the rule says).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from specconform.stats.reference import Reference

KT = 0.5  # Dirichlet(1/2) mixture: the Krichevsky–Trofimov plug-in

SparseLaw = tuple[np.ndarray, np.ndarray]  # ([S] int64 ascending, [S] float64 > 0)


class ExactLaws(Protocol):
    """The exact laws the e-process is tested against (a parsed reference.json)."""

    p1: SparseLaw  # p(t1 | prompt)
    p2: Mapping[int, SparseLaw]  # t1 -> p(t2 | prompt, t1)
    q2: Mapping[int, Mapping[int, SparseLaw]]  # depth -> t1 -> q_d(t2 | prompt, t1)


@dataclass(frozen=True)
class SequentialResult:
    """``log_e`` [N]: log of the combined e-process after each seed index; ``crossed_at``:
    the first seed index (1-based count of seeds) at which it reached log(1/α), None if
    never (PASS at the budget)."""

    log_e: np.ndarray
    alpha: float
    crossed_at: int | None
    families: tuple[tuple[str, ...], ...]

    @property
    def verdict(self) -> str:
        return "PASS" if self.crossed_at is None else "FAIL"


def kt_log_factors(
    strata: np.ndarray, cells: np.ndarray, p0: np.ndarray, n_cells: np.ndarray
) -> np.ndarray:
    """log(q̂(x) / p0(x)) per observation, in the given order.

    strata [N] int64 stratum key, cells [N] int64 cell within it, p0 [N] float64 the null
    probability of that cell, n_cells [N] int64 the stratum's number of cells with p0 > 0.
    q̂ = (count of this cell earlier in the stratum + ½ C p0(x)) / (earlier in the
    stratum + ½ C): a Dirichlet mixture centred on p0 (KT's total prior mass ½ C).
    """
    frame = pd.DataFrame({"s": strata, "c": cells})
    before_s = frame.groupby("s", sort=False).cumcount().to_numpy()
    before_c = frame.groupby(["s", "c"], sort=False).cumcount().to_numpy()
    # Dirichlet prior centred on the null with total mass ½ C (KT's mass): q̂ starts at
    # p0, so a correct sampler loses little early on, and learns a wrong law from data.
    q_hat = (before_c + KT * n_cells * p0) / (before_s + KT * n_cells)
    with np.errstate(divide="ignore"):
        return np.where(p0 > 0, np.log(q_hat) - np.log(np.where(p0 > 0, p0, 1.0)), np.inf)


def _lookup(law: SparseLaw, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into the law's support [N] int64, found [N] bool) of each token [N]."""
    support = law[0]
    if support.size == 0:
        return np.zeros(tokens.size, dtype=np.int64), np.zeros(tokens.size, dtype=bool)
    idx = np.minimum(np.searchsorted(support, tokens), support.size - 1)
    return idx, support[idx] == tokens


def _cell_table(laws: ExactLaws, t1: int, draft_loops: int | None):
    """The t2 cells of stratum t1: (support tokens [M] int64, cell law [C] float64).
    nospec: C = M cells, p(t2 | t1). Speculative at depth d: C = 2M cells, first the
    accepted cells min(p, q_d) then the rejected (corrected) cells (p − q_d)₊, over the
    union M of the supports of p and q_d."""
    if t1 not in laws.p2:
        raise ValueError(f"reference has no p_t2 for the observed first token {t1}")
    p_tok, p_pr = laws.p2[t1]
    if draft_loops is None:
        return p_tok, p_pr / p_pr.sum()
    depth = laws.q2.get(int(draft_loops), {})
    if t1 not in depth:
        raise ValueError(f"reference has no q_t2 at depth {draft_loops} for first token {t1}")
    q_tok, q_pr = depth[t1]
    union = np.union1d(p_tok, q_tok)
    p = np.zeros(union.size)
    q = np.zeros(union.size)
    p[np.searchsorted(union, p_tok)] = p_pr
    q[np.searchsorted(union, q_tok)] = q_pr
    table = np.concatenate([np.minimum(p, q), np.maximum(p - q, 0.0)])
    return union, table / table.sum()


def group_log_e(laws: ExactLaws, frame: pd.DataFrame, draft_loops: int | None) -> np.ndarray:
    """Running log e-value [N] of one group's samples (columns of samples.csv: seed, t1,
    t2, first_accepted) in seed order, against the exact laws."""
    frame = frame.sort_values("seed", kind="stable")
    t1 = frame["t1"].to_numpy(dtype=np.int64)
    t2 = frame["t2"].to_numpy(dtype=np.int64)
    n = t1.size
    idx1, ok1 = _lookup(laws.p1, t1)
    p1 = np.where(ok1, laws.p1[1][idx1] if laws.p1[1].size else 0.0, 0.0)  # [N] float64
    f1 = kt_log_factors(np.zeros(n, dtype=np.int64), idx1, p1, np.full(n, laws.p1[0].size))
    # t2 given t1: an impossible t1 keeps p0 = 0 (its path is infinite already).
    p0 = np.zeros(n)
    cell = np.zeros(n, dtype=np.int64)
    n_cells = np.ones(n, dtype=np.int64)
    rejected = None
    if draft_loops is not None:
        rejected = frame["first_accepted"].to_numpy(dtype=np.int64) != 1
    for t in np.unique(t1[ok1]):
        rows = np.flatnonzero(t1 == t)
        tokens, table = _cell_table(laws, int(t), draft_loops)
        col, ok2 = _lookup((tokens, table[: tokens.size]), t2[rows])
        c = col + (tokens.size * rejected[rows] if rejected is not None else 0)
        cell[rows] = c
        p0[rows] = np.where(ok2, table[c], 0.0)
        n_cells[rows] = int((table > 0).sum())
    f2 = kt_log_factors(t1, cell, p0, n_cells)
    return np.cumsum(f1 + f2)


def sequential_test(
    protocol: dict, laws: Any, samples: pd.DataFrame, alpha: float | None = None
) -> SequentialResult:
    """Combine every group of ``protocol`` over seed index: mean of e-processes within a
    family of groups that share seeds (same seed_offset), product across families.

    ``laws``: :class:`ExactLaws` (a parsed reference), or a
    ``specconform.calibration.World`` (its reference is parsed). Every group must hold the
    same number of seeds (index i of each group is its i-th seed)."""
    laws = _as_laws(laws)
    alpha = float(alpha if alpha is not None else protocol["alpha"])
    families: dict[int, list[dict]] = {}
    for g in protocol["groups"]:
        families.setdefault(int(g.get("seed_offset") or 0), []).append(g)
    total = None
    for members in families.values():
        paths = np.vstack(
            [
                group_log_e(laws, samples[samples["group"] == g["name"]], g.get("draft_loops"))
                for g in members
            ]
        )
        with np.errstate(invalid="ignore", over="ignore"):  # inf paths: impossible token
            top = paths.max(axis=0)
            fam = np.where(
                np.isinf(top),
                top,
                top + np.log(np.mean(np.exp(paths - np.where(np.isinf(top), 0.0, top)), axis=0)),
            )
        total = fam if total is None else total + fam
    assert total is not None  # the schema requires at least one group
    hit = np.flatnonzero(total >= np.log(1.0 / alpha))
    names = tuple(tuple(g["name"] for g in m) for m in families.values())
    return SequentialResult(total, alpha, int(hit[0]) + 1 if hit.size else None, names)


def _as_laws(laws: Any) -> ExactLaws:
    if isinstance(laws, dict):  # reference.json's dict
        return Reference(laws)
    if hasattr(laws, "t1_tokens"):  # a calibration World (dense tables + its reference)
        return Reference(laws.reference)
    return laws


def batch_ends(budget: int, batch: int) -> list[int]:
    """Seeds per group after each batch: batch, 2·batch, ..., budget (the last may be
    short)."""
    if batch < 1 or budget < 1:
        raise ValueError(f"batch {batch} and budget {budget} must be >= 1")
    return list(range(batch, budget, batch)) + [budget]


@dataclass(frozen=True)
class BatchPoint:
    """The e-process at the end of one batch: seeds per group so far, log E there, and
    the running sup of log E over every seed so far (what the stopping rule reads)."""

    seeds: int
    log_e: float
    sup_log_e: float


@dataclass(frozen=True)
class StoppingPoint:
    """Where the batch rule stops on a path: ``seeds`` per group (a batch end), whether it
    stopped because sup E reached 1/α (``crossed``), and the trajectory up to there."""

    seeds: int
    crossed: bool
    trajectory: tuple[BatchPoint, ...]


def stopping_point(log_e: np.ndarray, alpha: float, budget: int, batch: int) -> StoppingPoint:
    """The batch rule on a path ``log_e`` [N] (N ≤ budget seeds): the first batch end b with
    max(log_e[:b]) ≥ log(1/α) (FAIL there), else the budget (PASS) — or, if the path
    is shorter than both, the last batch end it reaches (a run still going)."""
    threshold = math.log(1.0 / alpha)
    sup = np.maximum.accumulate(log_e) if log_e.size else log_e
    points = []
    for end in batch_ends(budget, batch):
        if end > log_e.size:
            break
        points.append(BatchPoint(end, float(log_e[end - 1]), float(sup[end - 1])))
        if sup[end - 1] >= threshold:
            return StoppingPoint(end, True, tuple(points))
    return StoppingPoint(points[-1].seeds if points else 0, False, tuple(points))
