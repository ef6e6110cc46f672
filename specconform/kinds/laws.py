"""Deterministic test laws for the kernel protocols (numpy only, no torch).

Both the runner (which feeds the laws to a kernel) and `verify` (which recomputes the
verdict) build the laws from the protocol with these functions, so an archive's raw data
cannot smuggle in a different p or q.
"""

from __future__ import annotations

import numpy as np


def build_law(spec, vocab: int, *, inside: np.ndarray | None = None) -> np.ndarray:
    """A law over `vocab` tokens as float32 (what a kernel receives).

    spec: a list of `vocab` non-negative weights (normalised here), or a mapping /
    RandomLaw-like object with seed, support, concentration and within ("vocab" or "p").
    inside: [vocab] law whose support a `within: p` law is drawn from.
    """
    if isinstance(spec, (list, tuple)):
        w = np.asarray(spec, dtype=np.float64)
        return (w / w.sum()).astype(np.float32)
    get = spec.get if isinstance(spec, dict) else (lambda k, d=None: getattr(spec, k, d))
    rng = np.random.Generator(np.random.PCG64(int(get("seed"))))
    support = int(get("support"))
    pool = np.arange(vocab)
    if get("within", "vocab") == "p":
        if inside is None:
            raise ValueError("a law 'within: p' needs p")
        pool = np.flatnonzero(inside > 0)
        support = min(support, pool.size)
    tokens = rng.choice(pool, size=support, replace=False)
    masses = rng.dirichlet(np.full(support, float(get("concentration", 1.0))))
    law = np.zeros(vocab, dtype=np.float64)
    law[tokens] = masses
    return law.astype(np.float32)


def as_exact(law32: np.ndarray) -> np.ndarray:
    """The exact law a kernel should realise from float32 weights: normalised in float64."""
    w = law32.astype(np.float64)
    return w / w.sum()


def montecarlo_laws(case) -> tuple[np.ndarray, np.ndarray]:
    """p [K+1, V] and q [K, V] float32 for a Monte Carlo case, from its law_seed."""
    get = case.get if isinstance(case, dict) else (lambda k: getattr(case, k))
    K, V, seed = int(get("K")), int(get("vocab")), int(get("law_seed"))
    conc = float(get("concentration"))
    p = np.stack(
        [
            build_law(
                {"seed": seed * 1000 + 2 * j, "support": get("p_support"), "concentration": conc}, V
            )
            for j in range(K + 1)
        ]
    )
    # q_j shares part of p_j's support and has tokens of its own, so that accepted,
    # rejected and residual cells are all populated.
    q = np.stack(
        [
            build_law(
                {
                    "seed": seed * 1000 + 2 * j + 1,
                    "support": get("q_support"),
                    "concentration": conc,
                },
                V,
            )
            for j in range(K)
        ]
    )
    return p, q


def quadrature_case_laws(case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p, q and p_bonus [V] float32 for a quadrature case (dict or model). p_bonus
    defaults to p rolled by one token: different from p unless p is uniform."""
    get = case.get if isinstance(case, dict) else (lambda k: getattr(case, k))
    vocab = int(get("vocab"))
    p = build_law(get("p"), vocab)
    q = build_law(get("q"), vocab, inside=p)
    spec = get("p_bonus")
    p_bonus = np.roll(p, 1) if spec is None else build_law(spec, vocab)
    return p, q, p_bonus
