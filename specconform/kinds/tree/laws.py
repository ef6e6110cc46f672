"""Exact laws of tree speculation, target only (numpy, torch-free).

A tree's root is the last verified token; each node has a target law p (over the token
that follows it) and ordered children, each standing for one candidate token. Two laws:

- :func:`target_law`, the oracle: what an exact verifier must commit. The committed
  tokens follow the target chain: t1 ~ p_root; if t1 is a child's token the path moves to
  the first such child (a duplicate sibling never gets the path) and t2 ~ p_child, and so
  on; a token that is no child's, or any token drawn at a leaf, is the last one committed.
- :func:`threshold_law`: the law of SGLang's acceptance rule with its lossy knobs, as
  specconform's reference sampler implements it: at a node the coin u is compared with
  the siblings' cumulative target mass; child c_i (tried in order, duplicates skipped) is
  taken when u < acc_i / threshold_acc or p(c_i) >= threshold_single; when every child is
  refused the final token is drawn from p with the tried children's tokens removed. At
  thresholds 1 and 1 it equals the target law (checked in tests/toolkit/test_tree_laws.py).

Both return a :class:`SequenceLaw`: committed sequences (token tuples) with their
probabilities, plus the probability of an invalid final draw (zero residual mass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specconform.kinds.laws import as_exact, build_law


@dataclass(frozen=True)
class Tree:
    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    p: np.ndarray  # [N, V] float32: what a sampler receives

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def vocab(self) -> int:
        return int(self.p.shape[1])

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def level(self, node: int) -> int:
        depth = 0
        while self.parents[node] != -1:
            node, depth = self.parents[node], depth + 1
        return depth

    @property
    def height(self) -> int:
        """Most candidates a path can accept (SGLang: num_speculative_tokens - 1)."""
        return max(self.level(i) for i in range(self.nodes))


def tree_of(case) -> Tree:
    """A case (dict or model) as a Tree with float32 laws built from its specs."""

    def get(key: str) -> Any:
        return case[key] if isinstance(case, dict) else getattr(case, key)

    vocab = int(get("vocab"))
    laws = [
        build_law(spec if not hasattr(spec, "model_dump") else spec.model_dump(), vocab)
        for spec in get("laws")
    ]
    return Tree(tuple(int(x) for x in get("parents")), tuple(int(x) for x in get("tokens")),
                np.stack(laws))  # fmt: skip


@dataclass(frozen=True)
class SequenceLaw:
    probs: dict[tuple[int, ...], float]  # committed sequence -> probability
    error: float  # probability of a zero-mass residual at the final draw

    def truncated(self, length: int) -> dict[tuple[int, ...], float]:
        """The law of the first `length` committed tokens (shorter sequences whole)."""
        out: dict[tuple[int, ...], float] = {}
        for seq, prob in self.probs.items():
            key = seq[:length]
            out[key] = out.get(key, 0.0) + prob
        return out


def target_law(tree: Tree) -> SequenceLaw:
    """The exact target chain law (the oracle), built without any acceptance rule."""
    probs: dict[tuple[int, ...], float] = {}

    def walk(node: int, prefix: tuple[int, ...], mass: float) -> None:
        p = as_exact(tree.p[node])
        first_child: dict[int, int] = {}
        for child in tree.children(node):
            first_child.setdefault(tree.tokens[child], child)
        for x in np.flatnonzero(p > 0):
            seq, m = prefix + (int(x),), mass * float(p[x])
            if int(x) in first_child:
                walk(first_child[int(x)], seq, m)
            else:
                probs[seq] = probs.get(seq, 0.0) + m

    walk(0, (), 1.0)
    return SequenceLaw(probs, 0.0)


def threshold_law(tree: Tree, threshold_single: float = 1.0, threshold_acc: float = 1.0
                  ) -> SequenceLaw:  # fmt: skip
    """The law of the reference sampler's (SGLang's) rule at the given thresholds."""
    probs: dict[tuple[int, ...], float] = {}
    error = 0.0

    def draw(law: np.ndarray, prefix: tuple[int, ...], mass: float) -> None:
        nonlocal error
        total = float(law.sum())
        if total <= 0.0:
            error += mass
            return
        for x in np.flatnonzero(law > 0):
            seq = prefix + (int(x),)
            probs[seq] = probs.get(seq, 0.0) + mass * float(law[x]) / total

    def walk(node: int, prefix: tuple[int, ...], mass: float) -> None:
        p = as_exact(tree.p[node])
        kids = tree.children(node)
        if not kids:
            draw(p, prefix, mass)
            return
        acc, lo, seen = 0.0, 0.0, set()
        for child in kids:
            token = tree.tokens[child]
            if token in seen:
                continue
            seen.add(token)
            acc += float(p[token])
            hi = 1.0 if p[token] >= threshold_single else min(1.0, acc / threshold_acc)
            if hi > lo:
                walk(child, prefix + (token,), mass * (hi - lo))
                lo = hi
            if lo >= 1.0:
                return
        residual = p.copy()
        residual[list(seen)] = 0.0
        draw(residual, prefix, mass * (1.0 - lo))

    walk(0, (), 1.0)
    return SequenceLaw(probs, error)


def position_cells(law: SequenceLaw, position: int) -> dict[tuple[int, ...], float]:
    """Cells of position j (0-based): the first j+1 committed tokens, or the whole
    sequence when it ended earlier."""
    return law.truncated(position + 1)
