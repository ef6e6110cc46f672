"""Tests on the randomized probability integral transform (PIT) of committed tokens.

For a token x_t with reference law p_t over token ids (order: token id) the randomized
PIT is ``U_t = F_t(x_t - 1) + V_t * p_t(x_t)`` with V_t ~ Uniform(0, 1) independent of
everything else (Brockwell 2007). If x_t ~ p_t given the past, U_t ~ Uniform(0, 1)
given the past -- whatever p_t is -- so the U's of a correct sampler are i.i.d.
uniform, and any subsequence chosen by a rule that is known before each token is drawn
(a *predictable* selection: its slot, round, the previous U) is again i.i.d. uniform
(Doob's optional skipping). Every test below relies on that and on nothing else.

- :func:`randomized_pit`: U from (cdf_below, p_token, V), vectorized.
- :func:`uniformity`: Pearson χ² of U on equiprobable bins in one stratum (the
  expected counts n/bins are exact, no pooling); a KS statistic beside it, for
  information. Strata sum with :func:`specconform.stats.sum_chi2`.
- :func:`pair_independence`: pairs (U_a, U_b) where U_a is known before U_b is drawn;
  Pearson χ² of U_b's bin within each row of U_a's bin (g rows, g - 1 df each). Rows
  are a predictable selection of the U_b's, so this is valid for overlapping pairs
  (lag 1 chains: each U is the second member of one pair and the first of the next),
  where a plain g×g joint χ² is not (Good 1953: its null law is not χ²(g² - 1)).
- :func:`pair_correlation`: the same pairs, z of S = Σ (U_a - 1/2)(U_b - 1/2) against
  its null variance n/144: one degree of freedom aimed at monotone association (shared
  randomness drives both U's the same way), where the g×g table spends 12.
- :func:`acceptance_counts`: rejections at drafted positions against Σ TV_j, per
  position and in total (martingale z statistics).

The χ² p-values are asymptotic (martingale central limit theorem: counts of
predictable selections of i.i.d. uniforms; a random number of terms per stratum);
docs/calibration.md ("Sequence kind") measures their size at the shipped protocol's
sample sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

NO_PVALUE = float("nan")


def randomized_pit(cdf_below, p_token, v) -> np.ndarray:
    """U = cdf_below + v * p_token, float64, clipped to [0, 1] (rounding of a float64
    CDF can put cdf_below + p_token a few ulps above 1).

    cdf_below,  # [N] float64, F_t(x_t - 1)
    p_token,    # [N] float64, p_t(x_t); 0 is out of support (the caller excludes it)
    v,          # [N] float64, V_t ~ Uniform(0, 1)
    """
    c = np.asarray(cdf_below, dtype=np.float64)
    p = np.asarray(p_token, dtype=np.float64)
    w = np.asarray(v, dtype=np.float64)
    if not c.shape == p.shape == w.shape:
        raise ValueError(f"shapes differ: cdf_below {c.shape}, p_token {p.shape}, v {w.shape}")
    return np.clip(c + w * p, 0.0, 1.0)


def bin_of(u, bins: int) -> np.ndarray:
    """Equiprobable bin index of each U in [0, 1] ([N] int64 in 0..bins-1)."""
    return np.minimum((np.asarray(u, dtype=np.float64) * bins).astype(np.int64), bins - 1)


@dataclass(frozen=True)
class UniformityResult:
    """Pearson χ² of one stratum's U's on ``bins`` equiprobable bins.

    Expected counts n/bins are exact (no pooling: the bins are equiprobable by
    construction); df = bins - 1; with n 0 the stratum has no evidence (df 0, p NaN).
    ``ks_statistic``/``ks_pvalue``: Kolmogorov-Smirnov against Uniform(0, 1), reported,
    never used to decide (one omnibus rule per test keeps the size statement simple).
    """

    statistic: float
    df: int
    pvalue: float
    n: int
    observed: tuple[int, ...]
    expected: float  # per bin
    ks_statistic: float
    ks_pvalue: float


def uniformity(u, bins: int) -> UniformityResult:
    """Test that ``u`` ([N] float64 in [0, 1]) is a sample of Uniform(0, 1).

    Asymptotic χ²(bins - 1): exact expected counts, and the counts are sums of
    predictable selections of i.i.d. uniforms (module docstring)."""
    x = np.asarray(u, dtype=np.float64)
    n = int(x.size)
    if bins < 2:
        raise ValueError(f"bins must be >= 2, got {bins}")
    counts = np.bincount(bin_of(x, bins), minlength=bins)
    if n == 0:
        return UniformityResult(0.0, 0, NO_PVALUE, 0, tuple(int(c) for c in counts), 0.0, 0.0, 1.0)
    expected = n / bins
    stat = float(((counts - expected) ** 2).sum() / expected)
    ks = sps.kstest(x, "uniform")
    return UniformityResult(
        stat,
        bins - 1,
        float(sps.chi2.sf(stat, bins - 1)),
        n,
        tuple(int(c) for c in counts),
        float(expected),
        float(ks.statistic),
        float(ks.pvalue),
    )


@dataclass(frozen=True)
class MeanResult:
    """The mean of n U's against Uniform(0, 1)'s 1/2: z = (Σ U − n/2) / sqrt(n/12),
    two-sided normal p-value (n 0: no evidence, p NaN). One degree of freedom: the test
    for a *shift* of the U's (randomness reused so that a draw lands high or low in its
    CDF), which an omnibus χ² spreads over bins − 1 df and strata."""

    z: float
    pvalue: float
    n: int
    mean: float


def mean_test(u) -> MeanResult:
    """``u``: [N] float64 in [0, 1], i.i.d. Uniform(0, 1) under the null (predictable
    selections of the PIT). The sum's null law is Irwin–Hall (mean n/2, variance n/12);
    the normal approximation of its tail is accurate to a few % of α at n ≥ 50 and
    α ≥ 0.001 (the callers' min_samples)."""
    x = np.asarray(u, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return MeanResult(0.0, NO_PVALUE, 0, float("nan"))
    z = float((x.sum() - n / 2) / np.sqrt(n / 12))
    return MeanResult(z, float(2 * sps.norm.sf(abs(z))), n, float(x.mean()))


# Its fields read like the detail records' (details/) on purpose: a statistic's result
# states what it computed; the record states an archive object's keys.
@dataclass(frozen=True)
class PairResult:
    """χ² of U_b's bin within each bin (row) of U_a, g x g cells.

    Rows with an expected count n_row/g below ``min_expected`` are left out (the row
    sizes are known before any U_b is drawn, so the rule does not look at the data it
    tests); df = (g - 1) per row tested. ``observed`` is the g x g table (rows: U_a's
    bin), ``rows_tested`` which rows entered the statistic."""

    statistic: float
    df: int
    pvalue: float
    n: int
    grid: int
    observed: tuple[tuple[int, ...], ...]
    rows_tested: tuple[int, ...]


def pair_independence(u_first, u_second, grid: int = 4, *, min_expected: float = 5.0) -> PairResult:
    """Test that each U_b is Uniform(0, 1) given the bin of its U_a (independence and
    uniformity of the second member), over pairs in which U_a is known before U_b is
    drawn.

    u_first,   # [N] float64, U_a of each pair
    u_second,  # [N] float64, U_b of each pair

    Asymptotically χ²((g - 1) * rows tested): row r's U_b's are a predictable selection
    of i.i.d. uniforms, so each row is a g-cell goodness of fit with exact expected
    counts n_r/g, and the rows are asymptotically independent. Valid for overlapping
    pairs (module docstring). No pair, or no row reaching min_expected: df 0, p NaN.
    """
    a = np.asarray(u_first, dtype=np.float64)
    b = np.asarray(u_second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"pair members differ in shape: {a.shape} vs {b.shape}")
    if grid < 2:
        raise ValueError(f"grid must be >= 2, got {grid}")
    cell = bin_of(a, grid) * grid + bin_of(b, grid)
    table = np.bincount(cell, minlength=grid * grid).reshape(grid, grid)
    rows_n = table.sum(axis=1)
    tested = np.flatnonzero(rows_n / grid >= min_expected)
    obs = tuple(tuple(int(c) for c in r) for r in table)
    if tested.size == 0:
        return PairResult(0.0, 0, NO_PVALUE, int(a.size), grid, obs, ())
    sub = table[tested].astype(np.float64)
    expected = rows_n[tested, None] / grid
    stat = float(((sub - expected) ** 2 / expected).sum())
    df = int((grid - 1) * tested.size)
    return PairResult(
        stat,
        df,
        float(sps.chi2.sf(stat, df)),
        int(a.size),
        grid,
        obs,
        tuple(int(r) for r in tested),
    )


@dataclass(frozen=True)
class CorrelationResult:
    """z of S = Σ (U_a − 1/2)(U_b − 1/2) over n pairs; statistic z², df 1."""

    statistic: float
    df: int
    pvalue: float
    n: int
    sum_products: float
    z: float


def pair_correlation(u_first, u_second, *, min_pairs: int = 50) -> CorrelationResult:
    """Test that paired U's are uncorrelated, over pairs of i.i.d. uniforms under the null.

    u_first,   # [N] float64, U_a of each pair
    u_second,  # [N] float64, U_b of each pair

    Each term (U_a − 1/2)(U_b − 1/2) has conditional mean 0 given everything drawn
    before the later member (a martingale difference, as for :func:`pair_independence`)
    and variance (1/12)² = 1/144, so S / √(n/144) is asymptotically N(0, 1); the p-value
    is two-sided (χ² on 1 df). Fewer than ``min_pairs`` pairs: df 0, p NaN."""
    a = np.asarray(u_first, dtype=np.float64)
    b = np.asarray(u_second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"pair members differ in shape: {a.shape} vs {b.shape}")
    n = int(a.size)
    products = float(((a - 0.5) * (b - 0.5)).sum()) if n else 0.0
    if n < min_pairs:
        return CorrelationResult(0.0, 0, NO_PVALUE, n, products, 0.0)
    z = products / np.sqrt(n / 144.0)
    return CorrelationResult(float(z * z), 1, float(sps.chi2.sf(z * z, 1)), n, products, float(z))


@dataclass(frozen=True)
class AcceptanceCell:
    """Rejections at one cell of drafted positions (one position j, or several pooled)."""

    positions: tuple[int, ...]
    n: int  # drafted tokens (accepted + correction)
    rejected: int  # corrections
    expected: float  # Σ TV
    variance: float  # Σ TV (1 - TV)

    @property
    def z(self) -> float:
        return (
            (self.rejected - self.expected) / np.sqrt(self.variance) if self.variance > 0 else 0.0
        )


@dataclass(frozen=True)
class AcceptanceResult:
    """Rejections at every drafted position against their exact expectation.

    Decision: ``statistic`` = Σ_cells z_c², asymptotically χ²(cells) -- each cell's
    count is a sum of Bernoulli(TV_j) given the past (TV_j is known before the draft at
    j is drawn), i.e. a martingale, and disjoint predictable cells are asymptotically
    independent. It catches a rate off at one position (a shift that a total z would
    dilute, or that opposite shifts at two positions would cancel). Beside it, the
    total two-sided z (``total_z``, ``total_pvalue``), reported."""

    statistic: float
    df: int
    pvalue: float
    n: int
    rejected: int
    expected: float
    variance: float
    total_z: float
    total_pvalue: float
    cells: tuple[AcceptanceCell, ...]


def acceptance_counts(position, rejected, tv, *, min_expected: float = 5.0) -> AcceptanceResult:
    """Rejections at drafted positions against Σ TV, per position and in total.

    position,  # [N] int64, the draft position j of each drafted token
    rejected,  # [N] bool, the token is a correction (the draft at j was rejected)
    tv,        # [N] float64, TV(p_j, q_j) at that position, known before the draft

    Cells: one per position j, in order; a position whose expected rejections or
    acceptances (Σ TV, Σ (1 - TV)) fall below ``min_expected`` is pooled with the cells
    after it (later positions are reached less often), and a short tail into the last
    cell that reaches it -- a rule on the TVs alone, known before the data it tests.
    Nothing drafted, or no variance: df 0, p NaN (no evidence); a cell whose TVs are all
    0 (or all 1) with a rejection (an acceptance) is impossible: statistic inf, p 0.
    """
    pos = np.asarray(position, dtype=np.int64)
    rej = np.asarray(rejected, dtype=bool)
    t = np.asarray(tv, dtype=np.float64)
    if not pos.shape == rej.shape == t.shape:
        raise ValueError("position, rejected and tv differ in shape")
    if t.size and (not np.all(np.isfinite(t)) or np.any((t < 0) | (t > 1 + 1e-9))):
        raise ValueError("tv must be finite and lie in [0, 1]")
    t = np.clip(t, 0.0, 1.0)
    cells = _pooled_cells(pos, rej, t, min_expected)
    n, k = int(pos.size), int(rej.sum())
    e, var = float(t.sum()), float((t * (1 - t)).sum())
    if var > 0:
        z = (k - e) / np.sqrt(var)
        total_p = float(2 * sps.norm.sf(abs(z)))
    else:  # every TV is 0 or 1: rejections are determined; any deviation is impossible
        z, total_p = 0.0, (NO_PVALUE if k == round(e) else 0.0)
    impossible = [c for c in cells if c.variance == 0 and c.rejected != round(c.expected)]
    if impossible:  # TV 0 (1) everywhere in a cell, yet a rejection (acceptance) happened
        return AcceptanceResult(
            float("inf"), len(cells), 0.0, n, k, e, var, float(z), 0.0, tuple(cells)
        )
    tested = [c for c in cells if c.variance > 0]
    if not tested:
        return AcceptanceResult(0.0, 0, NO_PVALUE, n, k, e, var, float(z), total_p, tuple(cells))
    stat = float(sum(c.z**2 for c in tested))
    return AcceptanceResult(
        stat,
        len(tested),
        float(sps.chi2.sf(stat, len(tested))),
        n,
        k,
        e,
        var,
        float(z),
        total_p,
        tuple(cells),
    )


def _pooled_cells(pos, rej, t, min_expected: float) -> list[AcceptanceCell]:
    raw: list[AcceptanceCell] = []
    for j in np.unique(pos):
        sel = pos == j
        tj = t[sel]
        raw.append(
            AcceptanceCell(
                (int(j),),
                int(sel.sum()),
                int(rej[sel].sum()),
                float(tj.sum()),
                float((tj * (1 - tj)).sum()),
            )
        )
    out: list[AcceptanceCell] = []
    pending: AcceptanceCell | None = None
    for cell in raw:
        pending = cell if pending is None else _merge([pending, cell])
        if pending.expected >= min_expected and pending.n - pending.expected >= min_expected:
            out.append(pending)
            pending = None
    if pending is not None:
        if out:
            out[-1] = _merge([out[-1], pending])
        else:
            out.append(pending)
    return out


def _merge(cells: Sequence[AcceptanceCell]) -> AcceptanceCell:
    return AcceptanceCell(
        tuple(p for c in cells for p in c.positions),
        sum(c.n for c in cells),
        sum(c.rejected for c in cells),
        sum(c.expected for c in cells),
        sum(c.variance for c in cells),
    )
