"""specconform's reference tree sampler (the oracle the tree protocols trust), with
SGLang's lossy thresholds and the planted tree bugs of the mutant catalogue.

Rule (target only; :mod:`specconform.kinds.tree.laws` states its exact law): at node n,
with coin u = coins[n], the children are tried in sibling order; a child whose token an
earlier sibling already had is skipped (it carries no mass left); child c_i is taken when
u < acc_i / threshold_acc (acc_i: the tried children's cumulative target mass, p
normalised in float64) or p(c_i) >= threshold_single. When every child is refused the
last token is drawn from p_n with the tried children's tokens removed; at a leaf, from
p_n. The draw is an inverse CDF in float64 at the row's final uniform that never returns
a token of zero mass; a zero residual sets the row's error flag. Vectorised over rows.
"""

from __future__ import annotations

import numpy as np

from specconform.adapters.tree_types import TreeBatch, TreeOutput
from specconform.util.errors import UsageError

# The planted tree bugs (engine_under_test/mutants.py lists them, layer "tree").
TREE_MUTANTS = (
    "tree_residual_stale",
    "tree_sibling_for_child",
    "tree_coin_reused",
    "tree_final_wrong_node",
    "tree_sibling_order_ignored",
    "tree_coin_le",
    "tree_duplicate_counted",
    "tree_final_node_coin",
)


class ReferenceTree:
    def __init__(self, mutant: str | None = None, threshold_single: float = 1.0,
                 threshold_acc: float = 1.0):  # fmt: skip
        if mutant is not None and mutant not in TREE_MUTANTS:
            raise UsageError(
                f"--mutant {mutant}: tree protocols plant only tree mutants "
                f"({', '.join(TREE_MUTANTS)})"
            )
        self.mutant = mutant
        self.ts, self.ta = float(threshold_single), float(threshold_acc)
        lossy = "" if (self.ts, self.ta) == (1.0, 1.0) else f" ts={self.ts:g} ta={self.ta:g}"
        self.name = "specconform.reference_tree" + lossy + (f"[{mutant}]" if mutant else "")

    def accept_tree(self, b: TreeBatch) -> TreeOutput:
        m = self.mutant
        B, D = b.tokens.shape[0], b.depth
        rows = np.arange(B)
        first, sib = b.next_token, b.next_sibling
        if m == "tree_sibling_order_ignored":
            first, sib = _token_order(b.tokens, first, sib)
        total = b.p.astype(np.float64).sum(axis=2)  # [B, N]: normalises float32 laws
        cur = np.zeros(B, np.int64)
        done = np.zeros(B, bool)
        refused_all = np.zeros(B, bool)
        tokens = np.full((B, D + 1), -1, np.int64)
        path = np.full((B, D), -1, np.int64)
        nacc = np.zeros(B, np.int64)
        for level in range(D):
            child = first[rows, cur]
            done |= child < 0  # a leaf: the last token is a bonus from its p
            active = ~done
            coin = b.coins[:, 0] if m == "tree_coin_reused" else b.coins[rows, cur]
            acc = np.zeros(B)
            taken = np.zeros(B, bool)
            dest = cur.copy()
            seen: list[np.ndarray] = []
            c = np.where(active, child, -1)
            while True:
                valid = active & ~taken & (c >= 0)
                if not valid.any():
                    break
                cc = np.maximum(c, 0)
                tok = b.tokens[rows, cc]
                dup = np.zeros(B, bool)
                if m != "tree_duplicate_counted":
                    for s in seen:
                        dup |= s == tok
                pc = np.where(dup | ~valid, 0.0, b.p[rows, cur, tok] / total[rows, cur])
                acc += pc
                bound = acc / self.ta
                hit = (coin <= bound) if m == "tree_coin_le" else (coin < bound)
                hit = (hit | (pc >= self.ts)) & valid & ~dup
                goes = np.where(hit & (sib[rows, cc] >= 0), sib[rows, cc], cc)
                goes = goes if m == "tree_sibling_for_child" else cc
                tokens[hit, level] = tok[hit]
                path[hit, level] = goes[hit]
                dest = np.where(hit, goes, dest)
                taken |= hit
                seen.append(np.where(valid, tok, -1))
                c = np.where(valid, sib[rows, cc], -1)
            refused = active & ~taken
            refused_all |= refused
            done |= refused
            nacc += taken
            cur = np.where(taken, dest, cur)
        node = cur
        if m == "tree_final_wrong_node":
            prev = path[rows, np.maximum(nacc - 2, 0)]
            node = np.where(nacc >= 2, prev, 0)
        law = b.p[rows, node].astype(np.float64)
        if m != "tree_residual_stale":
            c = np.where(refused_all, first[rows, cur], -1)
            while (c >= 0).any():
                r = np.flatnonzero(c >= 0)
                law[r, b.tokens[r, c[r]]] = 0.0
                c[r] = sib[r, c[r]]
        u = b.coins[rows, cur] if m == "tree_final_node_coin" else b.final
        drawn, error = inverse_cdf(law, u)
        ok = ~error
        tokens[rows[ok], nacc[ok]] = drawn[ok]
        return TreeOutput(tokens, path, nacc, error)


def inverse_cdf(law: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token of each row of `law` [B, V] (float64, unnormalised) at uniform u [B]: the
    first whose cumulative mass exceeds u * total, stepped back to the last positive
    token when rounding lands on a zero-mass one; (tokens, zero-total flags)."""
    cdf = np.cumsum(law, axis=1)
    tot = cdf[:, -1]
    idx = (cdf > (u * tot)[:, None]).argmax(axis=1)
    positive = law > 0
    last = law.shape[1] - 1 - np.argmax(positive[:, ::-1], axis=1)
    bad = ~positive[np.arange(law.shape[0]), idx]
    idx[bad] = last[bad]
    return idx.astype(np.int64), ~(tot > 0)


def _token_order(tokens, first, sib):
    """The sibling_order_ignored mutant's links: each node's children in reverse order."""
    key = np.concatenate([tokens, first, sib], axis=1)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    n = tokens.shape[1]
    new_first = np.full((len(uniq), n), -1, np.int64)
    new_sib = np.full((len(uniq), n), -1, np.int64)
    for u, row in enumerate(uniq):
        f, s = row[n : 2 * n], row[2 * n :]
        for node in range(n):
            kids, c = [], f[node]
            while c >= 0:
                kids.append(int(c))
                c = s[c]
            kids.reverse()
            if kids:
                new_first[u, node] = kids[0]
                for a, b2 in zip(kids, kids[1:], strict=False):
                    new_sib[u, a] = b2
    inverse = inverse.reshape(-1)
    return new_first[inverse], new_sib[inverse]
