"""Stratification and cell alignment for counts of discrete tokens (numpy only).

A *stratum* is the set of samples sharing a conditioning key (t1, or the pair
(t1, t2)); a stratum is tested only if it holds at least ``min_samples`` samples, a
threshold fixed by the protocol before any data exists. Selecting strata by their
*size* is valid: conditionally on the keys, the tokens tested in each stratum are
independent draws from that stratum's law, whatever sizes the strata came out with.
"""

from __future__ import annotations

import numpy as np


def strata(keys: np.ndarray, min_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys ([N] int64) holding at least ``min_samples`` samples, ascending, and their sizes."""
    uniq, counts = np.unique(np.asarray(keys, dtype=np.int64), return_counts=True)
    keep = counts >= min_samples
    return uniq[keep], counts[keep]


def align(
    law_tokens: np.ndarray, law_probs: np.ndarray, observed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cells for a goodness-of-fit test of ``observed`` tokens against a sparse law.

    law_tokens [S] int64 (sorted, unique), law_probs [S] float64, observed [N] int64.
    Returns (tokens [C], probs [C], counts [C]) over the union of the law's support and
    the observed tokens, ascending; tokens outside the support get probability 0, so an
    observation there shows up as out of support instead of being silently dropped.
    """
    observed = np.asarray(observed, dtype=np.int64)
    tokens = np.union1d(law_tokens, observed)
    return tokens, dense_on(tokens, law_tokens, law_probs), counts_on(tokens, observed)


def on_union(
    tokens_a: np.ndarray, probs_a: np.ndarray, tokens_b: np.ndarray, probs_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two sparse laws on the union of their supports: (tokens [C], a [C], b [C])."""
    tokens = np.union1d(tokens_a, tokens_b)
    return tokens, dense_on(tokens, tokens_a, probs_a), dense_on(tokens, tokens_b, probs_b)


def dense_on(tokens: np.ndarray, law_tokens: np.ndarray, law_probs: np.ndarray) -> np.ndarray:
    """A sparse law (law_tokens [S] int64 ascending, law_probs [S] float64) as a dense
    [C] float64 vector over ``tokens`` ([C] ascending, a superset of law_tokens)."""
    out = np.zeros(tokens.size, dtype=np.float64)
    out[np.searchsorted(tokens, law_tokens)] = law_probs
    return out


def counts_on(tokens: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Counts ([C] int64) of ``observed`` tokens ([N], each in ``tokens`` [C] ascending)."""
    return np.bincount(np.searchsorted(tokens, observed), minlength=tokens.size)
