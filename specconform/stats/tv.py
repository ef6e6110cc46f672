"""Total-variation distance between a sampler's observed law and a target law, with a
confidence interval (issue 34: how far a lossy sampler is from exact).

Setting: n draws from an unknown law P over cells; the target law pi is known, with
support S (k cells). TV(P, pi) = sum over S of (pi_c - P_c)_+ depends on P only through
its coarsening P' onto S plus one cell "outside S" (where pi is 0), and equals
TV(P', pi') there. So everything below works on those k + 1 cells, fixed before the
data (pi's support).

- Plug-in: TV(P^', pi') with P^' the observed frequencies; biased upwards (it is
  positive even when P = pi).
- Estimate: the plug-in minus its bootstrap bias (parametric bootstrap from P^', ``boots``
  resamples from a fixed-seed PCG64), clamped to [0, 1].
- Interval (conservative, guaranteed at any n): by Weissman et al. (2003, "Inequalities for
  the L1 deviation of the empirical distribution"), P(||P^' - P'||_1 >= eps) <= (2^(k+1) - 2)
  exp(-n eps^2 / 2); and |TV(P^', pi') - TV(P', pi')| <= ||P^' - P'||_1 / 2 (triangle
  inequality). With eps = sqrt(2 (ln(2^(k+1) - 2) - ln(delta)) / n), the interval
  plug-in -/+ eps/2, clipped to [0, 1], covers TV(P, pi) with probability >= 1 - delta.
  Its coverage is calibrated by replication in tests/toolkit/test_tree_tv.py (it is
  conservative: observed coverage is near 1; the half-width shrinks as 1/sqrt(n)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METHOD = (
    "plug-in TV on the target's support cells + one outside cell, bootstrap bias-corrected; "
    "interval plug-in +/- eps/2 with Weissman's L1 bound (conservative)"
)


@dataclass(frozen=True)
class TVEstimate:
    plugin: float  # TV of the observed frequencies
    estimate: float  # bias-corrected, in [0, 1]
    lower: float  # interval at confidence 1 - delta
    upper: float
    delta: float  # the interval's miss probability
    n: int
    cells: int  # k + 1


def weissman_eps(cells: int, n: int, delta: float) -> float:
    """eps with P(||P^ - P||_1 >= eps) <= delta for n draws over `cells` categories."""
    if n <= 0:
        return math.inf
    log_count = cells * math.log(2.0) + math.log1p(-(2.0 ** (1 - cells)))  # ln(2^c - 2)
    return math.sqrt(2.0 * (log_count - math.log(delta)) / n)


def _tv(freq: np.ndarray, target: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(freq - target).sum(axis=-1)


def tv_interval(observed: np.ndarray, target: np.ndarray, outside: int, delta: float,
                *, boots: int = 200, seed: int = 0) -> TVEstimate:  # fmt: skip
    """observed: [k] counts on the target's support cells (int); target: [k] their
    probabilities (sum 1); outside: draws that fell outside the support."""
    counts = np.append(np.asarray(observed, np.int64), int(outside))
    law = np.append(np.asarray(target, np.float64), 0.0)
    law = law / law.sum()
    n = int(counts.sum())
    if n == 0:
        return TVEstimate(math.nan, math.nan, 0.0, 1.0, delta, 0, counts.size)
    freq = counts / n
    plugin = float(_tv(freq, law))
    rng = np.random.Generator(np.random.PCG64(seed))
    resampled = rng.multinomial(n, freq, size=boots) / n
    bias = float(_tv(resampled, law).mean()) - plugin
    half = weissman_eps(counts.size, n, delta) / 2.0
    return TVEstimate(
        plugin=plugin,
        estimate=float(min(1.0, max(0.0, plugin - bias))),
        lower=float(max(0.0, plugin - half)),
        upper=float(min(1.0, plugin + half)),
        delta=float(delta),
        n=n,
        cells=int(counts.size),
    )
