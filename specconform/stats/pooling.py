"""The fixed, pre-registered pooling rule for sparse cells of a Pearson χ² test.

Pearson's χ² is only close to its asymptotic law when every expected count is
large enough; a protocol therefore fixes, before any data exists, how sparse cells
are merged, so that the analyst never chooses a pooling after seeing the counts.

Rule (docs/contracts.md §4):

1. Cells with expected count 0 are *out of support*: they are never pooled (an
   observation there is reported separately and is fatal for goodness of fit).
2. Every remaining cell whose expected count is below ``min_expected`` is merged, in
   order of increasing expected count (ties broken by the lower index), into one
   pooled cell.
3. If that pooled cell's expected count is still below ``min_expected``, it is merged
   into the smallest remaining cell (ties: lower index).

The final cells are the unpooled cells in index order, then the pooled cell last.
The rule looks only at expected counts, never at observations, so it is fixed by
the law and the sample size and cannot bias the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pooling:
    """Where each original cell goes.

    ``group[i]`` is the final cell of original cell ``i`` (-1: out of support);
    ``pooled`` lists the original cells merged into the pooled cell, in merge order
    (sparse cells by increasing expected count, then the absorbing cell if step 3
    applied); ``cells`` is the number of final cells.
    """

    group: np.ndarray  # [C] int64, final cell index or -1
    pooled: tuple[int, ...]
    cells: int

    def apply(self, values: np.ndarray) -> np.ndarray:
        """Sum ``values`` ([C]) into the final cells ([cells]); out-of-support dropped."""
        values = np.asarray(values, dtype=np.float64)
        keep = self.group >= 0
        return np.bincount(self.group[keep], weights=values[keep], minlength=self.cells)


def pool_cells(expected: np.ndarray, min_expected: float = 5.0) -> Pooling:
    """Apply the pooling rule to expected counts ``expected`` ([C], >= 0)."""
    expected = np.asarray(expected, dtype=np.float64)
    if expected.ndim != 1:
        raise ValueError("expected counts must be one-dimensional")
    if np.any(expected < 0) or not np.all(np.isfinite(expected)):
        raise ValueError("expected counts must be finite and non-negative")
    support = np.flatnonzero(expected > 0)
    sparse = support[expected[support] < min_expected]
    # Stable sort: increasing expected count, ties by lower original index.
    sparse = sparse[np.argsort(expected[sparse], kind="stable")]
    dense = support[expected[support] >= min_expected]  # already in index order

    pooled = [int(i) for i in sparse]
    if pooled and expected[sparse].sum() < min_expected and dense.size:
        # Step 3: absorb the still-sparse pooled cell into the smallest dense cell.
        absorb = int(dense[np.argmin(expected[dense])])  # argmin: first (lowest) index on ties
        pooled.append(absorb)
        dense = dense[dense != absorb]

    group = np.full(expected.shape[0], -1, dtype=np.int64)
    group[dense] = np.arange(dense.size)
    if pooled:
        group[pooled] = dense.size
    cells = int(dense.size + (1 if pooled else 0))
    return Pooling(group=group, pooled=tuple(pooled), cells=cells)
