"""An independent numpy oracle of the sampling semantics (the ``oracle`` check).

Written from the specification in DESIGN.md ("Sampling core"), not from the engine's
code: the sequence runner compares an engine's serial reference law
(``target_law_for``) with this oracle applied to the same raw logits
(``target_logits``), so a reference that gets the semantics wrong (filters in the
wrong order, the top-p crossing token dropped, ties at the k-th value cut) is caught
even though every other test measures the engine against that reference.

The law, for one row of raw logits x with temperature T, top_k k and top_p P:

1. T == 0 (as a float32): greedy, the one-hot of argmax x, the lowest id on ties.
2. Otherwise z = float32(x) / float32(T), one IEEE float32 division per logit.
3. Top-k, when 0 < k < V: keep every token with z >= the k-th largest z; ties of the
   k-th value all survive, so more than k tokens may be kept.
4. Top-p, when float32(P) < 1: the float32 softmax of the kept z, ordered by
   probability descending (ties: lower id first), summed in float64; keep the shortest
   prefix of that order whose mass reaches P, the crossing token included; at least
   one token.
5. The law: the softmax of the kept z (everything else has probability 0).

Must not import torch or engine_under_test (tests/toolkit/test_layering.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingSemantics:
    """The parameters of one request's law (temperature 0: greedy; top_k 0: off)."""

    temperature: float
    top_k: int = 0
    top_p: float = 1.0


def _softmax32(z: np.ndarray) -> np.ndarray:
    """Float32 softmax over the finite entries of z (-inf entries get 0)."""
    finite = np.isfinite(z)
    out = np.zeros(z.shape, dtype=np.float32)
    zmax = z[finite].max()
    e = np.exp((z[finite] - zmax).astype(np.float32))
    out[finite] = e / e.sum(dtype=np.float32)
    return out


def kept_after_top_k(z: np.ndarray, top_k: int) -> np.ndarray:
    """[V] bool: tokens whose scaled logit is >= the k-th largest (ties survive)."""
    V = z.shape[0]
    if not 0 < top_k < V:
        return np.ones(V, dtype=bool)
    kth = np.sort(z)[::-1][top_k - 1]
    return z >= kth


def kept_after_top_p(probs: np.ndarray, kept: np.ndarray, top_p: float) -> np.ndarray:
    """[V] bool: the shortest prefix, in (prob desc, id asc) order, of the kept tokens
    whose float64 mass reaches top_p, the crossing token included (at least one)."""
    ids = np.flatnonzero(kept)
    # lexsort sorts by its last key first: probability descending, then id ascending.
    order = ids[np.lexsort((ids, -probs[ids].astype(np.float64)))]
    mass = np.cumsum(probs[order].astype(np.float64))
    reached = np.flatnonzero(mass >= top_p)
    n_keep = int(reached[0]) + 1 if reached.size else order.size
    out = np.zeros(kept.shape, dtype=bool)
    out[order[:n_keep]] = True
    return out


def oracle_law(logits: np.ndarray, params: SamplingSemantics) -> np.ndarray:
    """The law of one row under the specification above.

    logits,   # [V] float32 (float64/float16 are rounded to float32 first)
    returns   # [V] float64, non-negative, sums to 1
    """
    x = np.asarray(logits).astype(np.float32)
    if x.ndim != 1 or x.size < 1:
        raise ValueError(f"logits must be a non-empty [V] vector, got shape {x.shape}")
    V = x.shape[0]
    t32 = np.float32(params.temperature)
    if t32 == 0.0:
        out = np.zeros(V, dtype=np.float64)
        out[int(np.argmax(x))] = 1.0  # numpy's argmax: the first maximal index
        return out
    z = np.divide(x, t32, dtype=np.float32)
    kept = kept_after_top_k(z, int(params.top_k))
    p32 = float(np.float32(params.top_p))
    if p32 < 1.0:
        probs = _softmax32(np.where(kept, z, -np.inf).astype(np.float32))
        kept = kept_after_top_p(probs, kept, p32)
    return _softmax32(np.where(kept, z, -np.inf).astype(np.float32)).astype(np.float64)


@dataclass(frozen=True)
class LawComparison:
    """One reference law against the oracle's: same support, and the largest |Δp|."""

    same_support: bool
    max_abs_diff: float
    support_reference: int  # tokens of positive mass in the reference law
    support_oracle: int


def compare_laws(reference: np.ndarray, oracle: np.ndarray) -> LawComparison:
    """reference, oracle: [V] laws (any float dtype)."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(oracle, dtype=np.float64)
    return LawComparison(
        bool(np.array_equal(a > 0, b > 0)),
        float(np.max(np.abs(a - b))),
        int(np.count_nonzero(a > 0)),
        int(np.count_nonzero(b > 0)),
    )
