"""The tree kind's typed detail records (issue 34; one JSON object per test row)."""

from __future__ import annotations

from specconform.details.base import Record


class TreeGridDetail(Record):
    """Quadrature: the grid law of committed prefixes (the first j+1 tokens, every j)
    against the exact law; ``sequences``: prefixes of positive exact or grid mass."""

    case: str
    setting: int
    grid: int
    axes: int  # tree height + 1
    bound: float  # axes / grid + float allowance, per prefix
    max_abs_error: float
    worst_sequence: str  # tokens of the prefix with the largest error
    sequences: int  # sequences of positive exact or grid mass


class TreeStructureDetail(Record):
    """Rules an exact sampler never breaks: accepted path and tokens agree with the tree,
    every committed token has positive mass where it was drawn, no error flag."""

    case: str
    setting: int
    rows: int
    bad_path: int  # path not a chain of children, or node tokens not the committed ones
    zero_mass: int  # a committed token of zero target mass (or a refused child's token)
    errors: int  # rows with their error flag set on valid laws


class TreeGofDetail(Record):
    """Monte Carlo: Pearson chi-square of the first position+1 committed tokens."""

    case: str
    setting: int
    position: int
    cells: int
    pooled: tuple[int, ...]
    out_of_support: int


class TreeTVDetail(Record):
    """A lossy sampler's distance from the target law at one position (stats.tv)."""

    case: str
    setting: int
    threshold_single: float
    threshold_acc: float
    position: int
    plugin: float
    estimate: float
    lower: float
    upper: float
    confidence: float  # simultaneous: 1 - alpha / (TV rows)
    max_tv: float
    cells: int
    method: str


RECORDS: tuple[type[Record], ...] = (TreeTVDetail, TreeGridDetail, TreeGofDetail,
                                     TreeStructureDetail)  # fmt: skip
