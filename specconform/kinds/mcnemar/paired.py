"""Paired correctness statistics (torch-free): exact McNemar, Wilson intervals, power.

Vocabulary. A *trial* is one (question, seed): every group answers the same trials, so
each group's correctness is a 0/1 vector over the same trials. For a pair (base,
candidate): *wins* = trials the candidate got right and the base wrong, *losses* = the
base right and the candidate wrong, *ties* = both right or both wrong. Only the
discordant trials (wins + losses) carry information about a difference of accuracy:
conditionally on their number n_d, losses ~ Binomial(n_d, 1/2) under the null of equal
accuracy (McNemar 1947; the exact version is this conditional binomial test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.stats import binom, binomtest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint


@dataclass(frozen=True)
class PairResult:
    """Exact McNemar on one pair, in the scipy style (statistic, df, pvalue, n)."""

    statistic: float  # min(wins, losses): statsmodels' exact statistic
    df: None
    pvalue: float  # the p-value the decision uses (see `alternative`)
    n: int  # trials
    wins: int
    losses: int
    both_right: int
    both_wrong: int
    pvalue_two_sided: float  # statsmodels mcnemar(exact=True)
    pvalue_worse: float  # one-sided: P(L >= losses | n_d, 1/2)
    alternative: str  # "worse" | "different"

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    @property
    def ties(self) -> int:
        return self.both_right + self.both_wrong


def paired_table(base: Sequence[int], candidate: Sequence[int]) -> np.ndarray:
    """The 2x2 table [[both right, base only], [candidate only, both wrong]]."""
    b = np.asarray(base, dtype=bool)
    c = np.asarray(candidate, dtype=bool)
    if b.shape != c.shape:
        raise ValueError(f"paired vectors of different lengths: {b.shape} vs {c.shape}")
    return np.array(
        [[int(np.sum(b & c)), int(np.sum(b & ~c))], [int(np.sum(~b & c)), int(np.sum(~b & ~c))]]
    )


def exact_mcnemar(
    base: Sequence[int], candidate: Sequence[int], alternative: str = "worse"
) -> PairResult:
    """Exact McNemar of ``candidate`` against ``base`` over the same trials.

    ``alternative="different"``: the two-sided exact p of statsmodels
    (``mcnemar(table, exact=True)``: min(1, 2 P(Bin(n_d, 1/2) <= min(wins, losses))));
    ``"worse"``: the one-sided exact p of "the candidate loses more than it wins",
    P(Bin(n_d, 1/2) >= losses) (scipy's binomtest). With no discordant trial both are 1:
    the conditional law is a point mass, there is nothing to reject."""
    if alternative not in ("worse", "different"):
        raise ValueError(f"alternative {alternative!r}: 'worse' or 'different'")
    table = paired_table(base, candidate)
    (both_right, losses), (wins, both_wrong) = table.tolist()
    n_d = wins + losses
    res = mcnemar(table, exact=True)
    two = float(res.pvalue) if n_d else 1.0
    worse = float(binomtest(losses, n_d, 0.5, alternative="greater").pvalue) if n_d else 1.0
    return PairResult(
        statistic=float(res.statistic) if n_d else 0.0,
        df=None,
        pvalue=worse if alternative == "worse" else two,
        n=int(table.sum()),
        wins=int(wins),
        losses=int(losses),
        both_right=int(both_right),
        both_wrong=int(both_wrong),
        pvalue_two_sided=two,
        pvalue_worse=worse,
        alternative=alternative,
    )


@dataclass(frozen=True)
class Accuracy:
    correct: int
    n: int
    low: float  # Wilson interval at the stated level
    high: float
    level: float

    @property
    def value(self) -> float:
        return self.correct / self.n if self.n else float("nan")


def wilson(correct: int, n: int, level: float = 0.95) -> Accuracy:
    low, high = proportion_confint(correct, n, alpha=1.0 - level, method="wilson")
    return Accuracy(int(correct), int(n), float(low), float(high), level)


# --- exact power -----------------------------------------------------------------------


def critical_losses(n_d: int, alpha: float, alternative: str = "worse") -> int | None:
    """The smallest loss count among n_d discordant trials that rejects at ``alpha``
    (None: none does). One-sided: P(Bin(n_d, 1/2) >= l) <= alpha; two-sided, counting
    a loss excess only (a regression is what is planned for): 2 P(Bin >= l) <= alpha."""
    crit = _critical_table(n_d, alpha, alternative)[n_d]
    return None if crit > n_d else int(crit)


@cache
def _critical_table(trials: int, alpha: float, alternative: str) -> np.ndarray:
    """crit[n_d] for n_d = 0..trials; n_d + 1 where no count rejects (cached, read-only:
    the power searches evaluate it for one (trials, alpha) many times)."""
    level = alpha if alternative == "worse" else alpha / 2.0
    out = np.empty(trials + 1, dtype=np.int64)
    for n_d in range(trials + 1):
        ls = np.arange(n_d + 1)
        ok = ls[(binom.sf(ls - 1, n_d, 0.5) <= level) & (2 * ls > n_d)] if n_d else ls[:0]
        out[n_d] = ok[0] if ok.size else n_d + 1
    out.setflags(write=False)
    return out


def power(
    trials: int, discordance: float, loss_share: float, alpha: float, alternative: str = "worse"
) -> float:
    """Exact power of the exact McNemar test over ``trials`` paired trials: each trial is
    discordant with probability ``discordance`` and a discordant trial is a loss with
    probability ``loss_share`` (the accuracy drop is discordance * (2 loss_share - 1)).
    Sums P(reject | n_d) over the binomial law of the number n_d of discordant trials."""
    return _power(_critical_table(trials, alpha, alternative), discordance, loss_share)


def _power(crit: np.ndarray, discordance: float, loss_share: float) -> float:
    trials = crit.size - 1
    n_ds = np.arange(trials + 1)
    weights = binom.pmf(n_ds, trials, discordance)
    reject = np.where(crit <= n_ds, binom.sf(crit - 1, n_ds, loss_share), 0.0)
    return float(np.sum(weights * reject))


def detectable_drop(
    trials: int,
    discordance: float,
    alpha: float,
    target_power: float,
    alternative: str = "worse",
) -> float | None:
    """The smallest accuracy drop, discordance * (2 share - 1), detected with at least
    ``target_power`` at this discordance (bisection on the loss share in [1/2, 1]: the
    power grows with it); None when even a candidate that loses every discordant trial
    (share 1, drop = discordance) is not detected."""
    crit = _critical_table(trials, alpha, alternative)
    if _power(crit, discordance, 1.0) < target_power:
        return None
    lo, hi = 0.5, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if _power(crit, discordance, mid) >= target_power:
            hi = mid
        else:
            lo = mid
    return float(discordance * (2.0 * hi - 1.0))
