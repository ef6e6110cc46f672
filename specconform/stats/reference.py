"""Parsed ``raw/reference.json``: the exact laws a distribution run is tested against.

Sparse laws are (tokens [S] int64 ascending, probs [S] float64): p_t1, p_t2[t1],
p_t3[(t1, t2)] from a serial replay, and the draft laws q_t2[d][t1] at the first draft
position after prompt + t1. Parse once and reuse across replications (calibration does).
"""

from __future__ import annotations

import numpy as np

SparseLaw = tuple[np.ndarray, np.ndarray]  # ([S] int64 ascending, [S] float64)


class Reference:
    def __init__(self, ref: dict):
        self.vocab_size = int(ref["vocab_size"])
        self.p1 = sparse_law(ref["p_t1"])
        self.p2 = {int(k): sparse_law(v) for k, v in ref["p_t2"].items()}
        self.p3 = {_pair(k): sparse_law(v) for k, v in ref.get("p_t3", {}).items()}
        self.q2 = {
            int(d): {int(k): sparse_law(v) for k, v in laws.items()}
            for d, laws in ref.get("q_t2", {}).items()
        }
        # The adapter's capabilities (the runner records them): without a draft law
        # the tests that need q are not applicable (mechanism.not_applicable).
        self.draft_law = bool((ref.get("capabilities") or {}).get("draft_law", True))
        self._codes = None

    def codes(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Supports as int64 codes with base ``w`` > every token: (t1*w + t2) of every
        possible pair, (pair*w + t3) of every possible triple, and the pairs with a p_t3."""
        if self._codes is None or self._codes[0] != w:
            c2 = [t1 * w + law[0] for t1, law in self.p2.items()]
            c3 = [(a * w + b) * w + law[0] for (a, b), law in self.p3.items()]
            k3 = np.array([a * w + b for a, b in self.p3], dtype=np.int64)
            self._codes = (w, _cat(c2), _cat(c3), k3)
        return self._codes[1:]

    def unsupported(
        self, t1: np.ndarray, t2: np.ndarray, t3: np.ndarray, w: int
    ) -> tuple[
        tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]
    ]:
        """Out-of-support masks of committed (t1, t2, t3) rows ([N] int64 each; -1: none).

        -> ((checked1, checked2, checked3), (bad1, bad2, bad3)), [N] bool each: a position
        is checked only when its prefix is possible (an impossible t1 counts once, at t1),
        and t3 only where the reference has a p_t3 for the pair; ``w`` > every token.
        """
        codes2, codes3, keys3 = self.codes(w)
        ok1 = t1 >= 0
        bad1 = ok1 & ~np.isin(t1, self.p1[0])
        ok2 = ok1 & ~bad1 & (t2 >= 0)
        pair = t1 * w + t2
        bad2 = ok2 & ~np.isin(pair, codes2)
        ok3 = ok2 & ~bad2 & (t3 >= 0) & np.isin(pair, keys3)
        bad3 = ok3 & ~np.isin(pair * w + t3, codes3)
        return (ok1, ok2, ok3), (bad1, bad2, bad3)

    def possible(self, t1: int, t2: int | None = None) -> bool:
        """Whether the prefix (t1[, t2]) has positive reference probability."""
        if not np.isin(t1, self.p1[0]):
            return False
        return t2 is None or (t1 in self.p2 and bool(np.isin(t2, self.p2[t1][0])))

    def law(self, table: dict, key, what: str) -> SparseLaw | None:
        """The law for a stratum ``key`` (t1 or (t1, t2)); None for an impossible prefix
        the reference omits (its observations already fail the out-of-support row)."""
        if key in table:
            return table[key]
        if not self.possible(*(key if isinstance(key, tuple) else (key,))):
            return None
        raise ValueError(f"reference.json has no {what} for {key!r}")


def sparse_law(law: dict) -> SparseLaw:
    """{token: probability} as a sparse law; zero-probability entries are dropped."""
    tokens = np.fromiter((int(k) for k in law), dtype=np.int64, count=len(law))
    probs = np.fromiter((float(v) for v in law.values()), dtype=np.float64, count=len(law))
    order = np.argsort(tokens)
    keep = probs[order] > 0
    return tokens[order][keep], probs[order][keep]


def _cat(parts: list) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _pair(key: str) -> tuple[int, int]:
    a, b = key.split(",")
    return int(a), int(b)
