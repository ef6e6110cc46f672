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
p0(x) = 0 makes E infinite (an impossible token fails at once, as in the fixed-N tests).

Combination: groups that share seeds (e.g. sync and async, or all speculative groups
that share t1) are arbitrarily dependent, so their e-processes are *averaged* (a mean of
martingales on one filtration is one); families on disjoint seeds are independent and
their e-processes multiply. Numpy/pandas only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

KT = 0.5  # Dirichlet(1/2) mixture: the Krichevsky–Trofimov plug-in


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


def group_log_e(world, frame: pd.DataFrame, draft_loops: int | None) -> np.ndarray:
    """Running log e-value [N] of one group's samples (columns of samples.csv) in seed
    order, against the exact laws of ``world`` (a specconform.calibration.World)."""
    frame = frame.sort_values("seed", kind="stable")
    t1 = frame["t1"].to_numpy(dtype=np.int64)
    t2 = frame["t2"].to_numpy(dtype=np.int64)
    row = np.searchsorted(world.t1_tokens, t1)
    row_c = np.minimum(row, world.t1_tokens.size - 1)
    t1_ok = world.t1_tokens[row_c] == t1
    p1 = np.where(t1_ok, world.p1[row_c], 0.0)
    f1 = kt_log_factors(np.zeros_like(t1), row_c, p1, np.full(t1.size, int((world.p1 > 0).sum())))
    m = world.u_tokens.shape[1]
    toks = world.u_tokens[row_c]  # [N, M]
    col = np.argmax(toks == t2[:, None], axis=1)
    t2_ok = t1_ok & (toks[np.arange(t1.size), col] == t2)
    p = world.p2[row_c]
    if draft_loops is None:
        table, cell = p, col
    else:
        q = world.q2[draft_loops][row_c]
        table = np.concatenate([np.minimum(p, q), np.maximum(p - q, 0.0)], axis=1)
        acc = frame["first_accepted"].to_numpy(dtype=np.int64)
        cell = col + np.where(acc == 1, 0, m)
    table = table / table.sum(axis=1, keepdims=True)
    p0 = np.where(t2_ok, table[np.arange(t1.size), cell], 0.0)
    n_cells = (table > 0).sum(axis=1)
    f2 = kt_log_factors(row_c, cell, p0, n_cells)
    return np.cumsum(f1 + f2)


def sequential_test(
    protocol: dict, world, samples: pd.DataFrame, alpha: float | None = None
) -> SequentialResult:
    """Combine every group of ``protocol`` over seed index: mean of e-processes within a
    family of groups that share seeds (same seed_offset), product across families."""
    alpha = float(alpha if alpha is not None else protocol["alpha"])
    families: dict[int, list[dict]] = {}
    for g in protocol["groups"]:
        families.setdefault(int(g.get("seed_offset") or 0), []).append(g)
    total = None
    for members in families.values():
        paths = np.vstack(
            [
                group_log_e(world, samples[samples["group"] == g["name"]], g.get("draft_loops"))
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
    hit = np.flatnonzero(total >= np.log(1.0 / alpha))
    names = tuple(tuple(g["name"] for g in m) for m in families.values())
    return SequentialResult(total, alpha, int(hit[0]) + 1 if hit.size else None, names)
