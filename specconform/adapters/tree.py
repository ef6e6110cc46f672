"""Tree sampler adapters: the interface a tree-verification kernel implements, its
validation, and how a protocol names one (``tree_sampler.adapter``: ``reference`` or
``package.module:factory``, called with ``device=``, ``mutant=``, ``threshold_single=``,
``threshold_acc=``).

A kernel is white-box: one coin per node and one final uniform per row are inputs. The
coin of node n decides among n's children; the final uniform draws the last committed
token (a correction after every child was refused, or a bonus at a leaf). Layout as
SGLang's ``retrive_next_token`` / ``retrive_next_sibling`` (first child, next sibling,
-1 for none), so rows of differently shaped trees share one batch (padded nodes are
unreachable).
"""

from __future__ import annotations

import importlib

import numpy as np

from specconform.adapters.tree_types import TreeBatch, TreeOutput
from specconform.adapters.types import AdapterError, one_line
from specconform.kinds.tree.laws import Tree
from specconform.util.errors import UsageError

__all__ = ["TreeBatch", "TreeOutput", "batch_of", "links", "load_tree_kernel"]


def links(tree: Tree, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """First-child and next-sibling arrays [nodes] for a tree padded to `nodes`."""
    first = np.full(nodes, -1, np.int64)
    sibling = np.full(nodes, -1, np.int64)
    for node in range(tree.nodes):
        kids = tree.children(node)
        if kids:
            first[node] = kids[0]
            for a, b in zip(kids, kids[1:], strict=False):
                sibling[a] = b
    return first, sibling


def batch_of(trees: list[Tree], rows: np.ndarray, coins: np.ndarray, final: np.ndarray
             ) -> TreeBatch:  # fmt: skip
    """A batch whose row i is trees[rows[i]] (padded to the largest tree)."""
    nodes = max(t.nodes for t in trees)
    vocab = trees[0].vocab
    tok = np.zeros((len(trees), nodes), np.int64)
    first = np.full((len(trees), nodes), -1, np.int64)
    sib = np.full((len(trees), nodes), -1, np.int64)
    p = np.zeros((len(trees), nodes, vocab), np.float32)
    for i, t in enumerate(trees):
        tok[i, 1 : t.nodes] = t.tokens[1:]
        first[i], sib[i] = links(t, nodes)
        p[i, : t.nodes] = t.p
        p[i, t.nodes :] = t.p[0]  # unreachable padding, a valid law all the same
    return TreeBatch(tok[rows], first[rows], sib[rows], p[rows],
                     np.ascontiguousarray(coins, np.float64),
                     np.ascontiguousarray(final, np.float64),
                     max(t.height for t in trees))  # fmt: skip


class CheckedTreeKernel:
    """A tree kernel whose every answer is validated (structure only, never the law)."""

    def __init__(self, kernel, adapter: str):
        name = getattr(kernel, "name", None)
        if not isinstance(name, str) or not name:
            raise AdapterError(f"sampler.adapter {adapter}: the factory's object has no `name`")
        if not callable(getattr(kernel, "accept_tree", None)):
            raise AdapterError(f"sampler.adapter {adapter}: the object has no accept_tree()")
        self._k, self.name, self._adapter = kernel, name, adapter

    def describe(self) -> dict:
        from specconform.adapters.engine import source_digest

        source, digest = source_digest(self._k)
        return {"adapter": self._adapter, "name": self.name, "source": source,
                "source_sha256": digest}  # fmt: skip

    def _fail(self, what: str) -> AdapterError:
        return AdapterError(f"sampler.adapter {self._adapter}: accept_tree() {what}")

    def accept_tree(self, batch: TreeBatch) -> TreeOutput:
        try:
            out = self._k.accept_tree(batch)
        except UsageError:
            raise
        except (Exception, SystemExit) as exc:  # an adapter's exit is its failure
            raise self._fail(f"raised {one_line(exc)}") from None
        B, D = batch.tokens.shape[0], batch.depth
        for field, shape in (("tokens", (B, D + 1)), ("path", (B, D)),
                             ("num_accepted", (B,)), ("error", (B,))):  # fmt: skip
            a = getattr(out, field, None)
            if not isinstance(a, np.ndarray) or a.shape != shape:
                got = getattr(a, "shape", type(a).__name__)
                raise self._fail(f"returned {field} {got}, expected a numpy array {shape}")
        vocab = batch.p.shape[-1]
        if out.tokens.min() < -1 or out.tokens.max() >= vocab:
            raise self._fail(f"returned a token outside [-1, {vocab})")
        if np.any(out.num_accepted < 0) or np.any(out.num_accepted > D):
            raise self._fail(f"returned num_accepted outside [0, {D}]")
        return TreeOutput(out.tokens.astype(np.int64), out.path.astype(np.int64),
                          out.num_accepted.astype(np.int64), out.error.astype(bool))  # fmt: skip


def load_tree_kernel(adapter: str, device: str, mutant: str | None,
                     threshold_single: float, threshold_acc: float) -> CheckedTreeKernel:  # fmt: skip
    """Resolve a tree protocol's ``sampler.adapter``."""
    if adapter == "reference":
        from specconform.adapters.tree_reference import ReferenceTree

        return CheckedTreeKernel(ReferenceTree(mutant, threshold_single, threshold_acc), adapter)
    module_name, _, attr = adapter.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"sampler.adapter {adapter!r}: cannot import: {exc}") from None
    try:
        kernel = factory(device=device, mutant=mutant, threshold_single=threshold_single,
                         threshold_acc=threshold_acc)  # fmt: skip
    except UsageError:
        raise
    except (Exception, SystemExit) as exc:  # a factory's exit is its failure
        raise AdapterError(f"sampler.adapter {adapter}: factory raised {one_line(exc)}") from None
    return CheckedTreeKernel(kernel, adapter)
