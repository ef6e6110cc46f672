"""The numerics model of a "deterministic" check (issue 32, part 1): how far two correct
computations of one law may differ, and when a token decision is a near-tie.

Two computations of the same law (the engine's batched round and the serial reference,
or one request batched and rerun alone) run the same model through different kernels:
another batch shape picks another matmul tiling and reduction order, so the last bits of
every logit move. A check that assumes bit-exactness is then a statistical check with an
unknown error rate. This module states the error instead, so that a tolerance follows
from the model and a decision inside the error is counted as a near-tie, never excused.

Model (stated, not measured; docs/contracts.md "Numerics model"):

1. Logits. A logit is the end of ``kernels`` reductions, each a dot product of
   ``reduction_length`` terms in ``dtype``. A floating-point sum of n terms in another
   order differs by at most about n * eps * (sum of |terms|) (Higham, recursive
   summation: (n - 1) u, u = eps / 2, each way); errors of successive kernels add. With
   activations normalised (RMSNorm), ``growth="worst"`` states that bound:
   ``delta = eps(dtype) * reduction_length * kernels * scale``, ``scale`` the largest
   |logit| after the temperature (scale = max |logit| / T). It is loose (the tiny
   preset: 1.2e-7 x 128 x 73 x 10 = 0.011, a law bound of 2e-2, larger than the bugs
   the trace check exists for). ``growth="random"`` (the default) states the usual
   model of rounding errors as independent and random-signed: they grow like the square
   root of the number of terms and of kernels, ``delta = eps * sqrt(reduction_length *
   kernels) * scale`` (the tiny preset at scale 10: 1.1e-4, a law bound of 5.8e-5; at
   its measured scale, |logit| up to ~30 and T 0.6: 6.1e-4 and 3.1e-4: the measured
   1.083e-5 that failed a 1e-5 tolerance lies inside it, a bfloat16-rounded q, ~1e-3,
   outside). The random model is an assumption, so its consequences are counted and
   bounded (item 3) rather than trusted.
2. Probabilities. softmax(z + e) / softmax(z) lies in [exp(-2 |e|), exp(2 |e|)] per
   token, so one probability moves by a ratio of at most exp(2 delta) - 1 =:
   ``ratio_bound`` (what an accept decision u q(x) < p(x) sees). In absolute terms the
   bound is tighter: for any set A of tokens (one token, or the tokens up to b, whose
   mass is the CDF value F_b) the log-odds of P(A) move by at most 2 delta, and a
   logistic moved by 2 delta moves by at most tanh(delta / 2), so every probability and
   every CDF value moves by at most ``law_bound`` = tanh(delta / 2) (about delta / 2;
   the first version stated exp(2 delta) - 1, four times looser).
3. Decisions. A token drawn by inverse CDF from a uniform u differs between the two
   computations only if u lies within ``law_bound`` of a CDF boundary (u within the
   error); an accept decision u * q(x) < p(x) flips only if |u q(x) - p(x)| <=
   ratio_bound * (p(x) + u q(x)). Such a decision is a **near-tie**. Per decision the
   chance of a near-tie is at most ``near_tie_rate`` = 2 * law_bound * (number of CDF
   boundaries the uniform can fall near), so over n decisions the count of near-ties is
   stochastically below Binomial(n, near_tie_rate): :func:`near_tie_limit` is the count a
   check may show at a stated level before the numerics model itself is refuted.

Numbers only (numpy/scipy): no torch, no engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

# Machine epsilon of the dtypes a law is computed in (numpy has no bfloat16).
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@dataclass(frozen=True)
class NumericsModel:
    """The stated error model of one law computation (module docstring, items 1-2)."""

    dtype: str  # "float32", "bfloat16", ...
    reduction_length: int  # terms per dot product (the hidden size)
    kernels: int  # reductions on the path to a logit (matmuls of every layer and loop)
    scale: float = 1.0  # largest |logit / temperature|
    growth: str = "random"  # "random": sqrt growth of rounding errors; "worst": linear

    def __post_init__(self):
        if self.dtype not in EPS:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {sorted(EPS)}")
        if self.reduction_length < 1 or self.kernels < 1 or not self.scale > 0:
            raise ValueError("reduction_length, kernels and scale must be positive")
        if self.growth not in ("random", "worst"):
            raise ValueError(f"growth {self.growth!r}: expected 'random' or 'worst'")

    @property
    def logit_bound(self) -> float:
        """delta: the largest difference of one logit between two kernel orders."""
        terms = self.reduction_length * self.kernels
        grown = terms if self.growth == "worst" else math.sqrt(terms)
        return EPS[self.dtype] * grown * self.scale

    @property
    def law_bound(self) -> float:
        """The largest |dp| of one token, and of one CDF value: tanh(delta / 2) (item 2:
        the log-odds of any event move by at most 2 delta)."""
        return math.tanh(self.logit_bound / 2.0)

    @property
    def ratio_bound(self) -> float:
        """The largest relative move of one probability: exp(2 delta) - 1 (capped at 1)."""
        return min(1.0, math.expm1(2.0 * self.logit_bound))


def law_tolerance(model: NumericsModel) -> float:
    """The tolerance of a law comparison (max |dp| of two computations of one law) that
    the model implies: what `trace`/`teacher_forcing` checks may differ by on a correct
    engine. A difference above it refutes the model (or shows a bug)."""
    return model.law_bound


def is_inverse_cdf_near_tie(u: float, cdf: np.ndarray, token: int, bound: float) -> bool:
    """Whether drawing ``token`` from ``u`` by inverse CDF was within the error: u lies
    within ``bound`` of either boundary of the token's CDF interval [F(token-1), F(token)).

    cdf: [V] float64, non-decreasing, cdf[-1] = 1 (the reference law's CDF in token order).
    """
    lo = float(cdf[token - 1]) if token > 0 else 0.0
    hi = float(cdf[token])
    return abs(u - lo) <= bound or abs(hi - u) <= bound


def is_accept_near_tie(u: float, p_x: float, q_x: float, bound: float) -> bool:
    """Whether the accept decision u * q(x) < p(x) was within the error: both sides move
    by at most ``bound`` relative, so the decision can flip only if
    |u q - p| <= bound * (p + u q)."""
    return abs(u * q_x - p_x) <= bound * (p_x + u * q_x)


def near_tie_rate(model: NumericsModel, boundaries: int) -> float:
    """Upper bound on the chance that one decision is a near-tie: u uniform on [0, 1)
    falls within law_bound of one of ``boundaries`` CDF boundaries (or of the accept
    threshold: boundaries = 1)."""
    return min(1.0, 2.0 * model.law_bound * max(1, int(boundaries)))


def token_near_tie_rate(model: NumericsModel, boundaries: int) -> float:
    """Upper bound on the chance that one committed token of a speculative (or plain)
    generation came from a near-tie, summing its decisions (runner/near_ties.py): a
    draft, target or bonus draw by inverse CDF (2 law_bound per boundary); the accept
    coin (u within a relative ratio_bound of p(x)/q(x): width 4 r / (1 - r)^2); and a
    correction, drawn with chance TV from the residual whose CDF moves by at most
    :func:`residual_bound` = 6 law_bound / (TV - 2 law_bound): at most 24 law_bound per
    boundary (TV >= 4 law_bound), or TV < 4 law_bound itself."""
    eps, r = model.law_bound, model.ratio_bound
    b = max(1, int(boundaries))
    coin = 4.0 * r / (1.0 - r) ** 2 if r < 1.0 else 1.0
    return min(1.0, 2.0 * eps * b + coin + 24.0 * eps * b)


def filter_near_tie_rate(model: NumericsModel, boundaries: int) -> float:
    """Upper bound on the chance that one filtered law comparison (top-k and/or top-p)
    shows a support near-tie (runner/filter_ties.py): each of its two filter thresholds
    (the k-th largest logit, the top-p mass) is a fixed point that the law's CDF values
    or log-probabilities fall near within the error, stated as a uniform falling near one
    of ``boundaries`` boundaries (:func:`near_tie_rate`), once per filter."""
    return min(1.0, 2.0 * near_tie_rate(model, boundaries))


def residual_bound(law_bound: float, tv: float) -> float:
    """How far a CDF value of the normalised residual (p - q)+ / TV moves when p and q
    each move within law_bound: an unnormalised partial sum moves by at most
    sum |dp| + sum |dq| <= 4 law_bound (sum |dp| = 2 TV(p, p') <= 2 law_bound), TV by at
    most 2 law_bound, so R_b = G_b / TV by at most 6 law_bound / (TV - 2 law_bound);
    1 (anything) when TV <= 2 law_bound."""
    if tv <= 2.0 * law_bound:
        return 1.0
    return min(1.0, 6.0 * law_bound / (tv - 2.0 * law_bound))


def near_tie_limit(decisions: int, rate: float, alpha: float) -> int:
    """The largest near-tie count the model allows over ``decisions`` at level
    ``alpha``: the (1 - alpha) quantile of Binomial(decisions, rate). A count above it
    refutes the stated numerics model (P <= alpha under the model), so a check reports
    it as a failure; at or below it, near-ties are reported, counted, and not failures."""
    if decisions <= 0:
        return 0
    return int(binom.ppf(1.0 - alpha, int(decisions), min(1.0, max(0.0, rate))))
