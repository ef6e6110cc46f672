"""Top cells of χ² detail records: which cells carry the statistic.

Per original (unpooled) cell, the contribution (O - E)² / E and the standardized residual
(O - E) / √E. The test's own statistic pools sparse cells first, so the contributions of
pooled cells do not add up to it exactly; they still say where the counts are off, which
is what a developer needs. An observation on a cell of expected count 0 contributes
infinity (the out-of-support rule fails it on its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from specconform.details.distribution import HomogeneityStratum, RejectionStratum

from .model import TOP_CELLS, Cell, Stratum

Decode = Callable[[object], str]  # a cell label -> its text ("17 'the'")


def contribution(observed: float, expected: float) -> tuple[float, float]:
    """((O - E)² / E, (O - E) / √E); an observation where E == 0 is infinite."""
    if expected <= 0:
        return (math.inf, math.inf) if observed > 0 else (0.0, 0.0)
    diff = observed - expected
    return diff * diff / expected, diff / math.sqrt(expected)


def top_cells(
    labels: Sequence,
    observed: Sequence[float],
    expected: Sequence[float],
    decode: Decode,
    limit: int | None = TOP_CELLS,
) -> tuple[Cell, ...]:
    """The cells by contribution, largest first (``limit`` None: all of them)."""
    cells = []
    for label, o, e in zip(labels, observed, expected, strict=False):
        c, r = contribution(float(o), float(e))
        cells.append(Cell(decode(label), float(o), float(e), c, r))
    cells.sort(key=lambda c: -c.contribution)
    return tuple(cells if limit is None else cells[:limit])


def cells_of(stratum, decode: Decode = str, limit: int | None = TOP_CELLS) -> tuple[Cell, ...]:
    """The cells of one stratum record (goodness of fit, rejection or homogeneity)."""
    if isinstance(stratum, HomogeneityStratum):
        return homogeneity_cells(stratum, decode, limit)
    if isinstance(stratum, RejectionStratum):  # (accepted, rejected) first drafts
        return top_cells(("accepted", "rejected"), stratum.observed, stratum.expected, str, limit)
    return top_cells(stratum.tokens, stratum.observed, stratum.expected, decode, limit)


def homogeneity_cells(
    s: HomogeneityStratum, decode: Decode, limit: int | None = TOP_CELLS
) -> tuple[Cell, ...]:
    """Group a's counts against what homogeneity expects of them: n_a / n of each
    cell's total (group b's residuals are the same cells with the sign flipped)."""
    share = s.n_a / s.n if s.n else 0.0
    expected = [(a + b) * share for a, b in zip(s.observed_a, s.observed_b, strict=True)]
    return top_cells(s.tokens, s.observed_a, expected, decode, limit)


def worst_record(strata: Sequence):
    """The stratum record with the largest statistic (an infinite one first); None when
    no stratum has samples."""
    scored = [s for s in strata if getattr(s, "n", 0)]
    if not scored:
        return None

    def size(s) -> float:
        stat = getattr(s, "statistic", None)
        if stat is None:
            stat = getattr(s, "chi2_statistic", None)
        unseen = int(getattr(s, "out_of_support", None) or 0)  # observations where E = 0
        return math.inf if stat is None and unseen else float(stat or 0.0)

    return max(scored, key=size)


def worst_stratum(strata: Sequence, position: str, decode: Decode) -> Stratum | None:
    """The worst stratum (:func:`worst_record`) with its top cells."""
    s = worst_record(strata)
    if s is None:
        return None
    cells = cells_of(s, decode)
    where = ", ".join(
        f"{k}={getattr(s, k)}" for k in ("t1", "t2") if getattr(s, k, None) is not None
    ) or (f"group {s.group}" if getattr(s, "group", None) else "all")
    stat = getattr(s, "statistic", getattr(s, "chi2_statistic", None))
    df = getattr(s, "df", getattr(s, "chi2_df", None))
    p = getattr(s, "pvalue", getattr(s, "chi2_pvalue", None))
    return Stratum(where, position, stat, df, p, int(s.n), cells)
