"""Tree runner: drive a tree kernel (``specconform.adapters.tree``) over a protocol's
trees, for every threshold setting, and reduce its outputs to counts.

- quadrature: for a case of height h, a midpoint grid of G points on each of h + 1 axes:
  the coin of every node at level l takes axis l (one path visits one node per level,
  so nodes of a level can share an axis), the final draw axis h. G^(h+1) rows.
- montecarlo: ``seeds.count`` rows per case with coins and final uniforms from PCG64
  keyed by (offset, setting index); the cases' rows interleaved round-robin, so every
  kernel call mixes trees of different shapes.
- edge sweep (both methods): all coins at one edge value (0, a sibling CDF boundary, the
  largest double below 1) and the final uniform at 0, 1/2, a residual CDF boundary or the
  largest double below 1: committed tokens must have positive target mass.

Raw data: ``raw/tree/counts.csv`` (setting, source, case, tokens, path, count; tokens
"error" for a row with its error flag) and ``raw/tree/grid.json`` (each case's G).
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd

from specconform.adapters.tree import TreeOutput, batch_of, load_tree_kernel
from specconform.kinds.laws import as_exact
from specconform.kinds.tree.laws import Tree, tree_of

_MAX_CHUNK_ELEMENTS = 1 << 22  # rows * nodes * V per kernel call
LAST_BELOW_ONE = float(np.nextafter(1.0, 0.0))


def collect(loaded, *, mutant, progress, log, context) -> dict[str, bytes]:
    model = loaded.model
    trees = [tree_of(case) for case in model.cases]
    names = [case.name for case in model.cases]
    frames, kernels = [], []
    with progress("tree", len(model.settings) * len(trees)) as bar:
        for s_index, s in enumerate(model.settings):
            kernel = load_tree_kernel(model.tree_sampler.adapter, model.device, mutant,
                                      s.threshold_single, s.threshold_acc)  # fmt: skip
            log(f"kernel: {kernel.name} on {model.device}")
            kernels.append(kernel.describe())
            parts = [_edges(trees)]
            if model.method == "grid":
                parts.append(_grid_rows(trees, [c.grid for c in model.cases]))
            else:
                parts.append(_random_rows(trees, model.seeds.count, model.seeds.offset, s_index))
            for source, (rows, coins, final) in zip(("edge", model.method), parts, strict=True):
                out = _run(kernel, trees, rows, coins, final)
                frames.append(_counts(out, rows, names, s_index, source))
            bar.advance(len(trees))
    # The first setting's kernel as every sampler kind records it; each setting's name
    # (its thresholds) beside it.
    context.outputs.add_run_fields(
        sampler_adapter=kernels[0], tree_kernel_names=[k["name"] for k in kernels]
    )
    counts = pd.concat(frames, ignore_index=True)
    buf = io.StringIO()
    counts.to_csv(buf, index=False, lineterminator="\n")
    grids = {c.name: c.grid for c in model.cases}
    return {
        "raw/tree/counts.csv": buf.getvalue().encode(),
        "raw/tree/grid.json": json.dumps(grids, sort_keys=True).encode(),
    }


def midpoint_grid(g: int) -> np.ndarray:
    return (np.arange(g, dtype=np.float64) + 0.5) / g


def _levels(tree: Tree, nodes: int) -> np.ndarray:
    out = np.zeros(nodes, np.int64)
    out[: tree.nodes] = [tree.level(i) for i in range(tree.nodes)]
    return out


def _grid_rows(trees, grids):
    nodes = max(t.nodes for t in trees)
    rows, coins, final = [], [], []
    for i, (t, g) in enumerate(zip(trees, grids, strict=True)):
        h = t.height
        axes = np.stack(np.meshgrid(*([midpoint_grid(g)] * (h + 1)), indexing="ij"), -1)
        axes = axes.reshape(-1, h + 1)  # [g^(h+1), h+1]
        coins.append(axes[:, np.minimum(_levels(t, nodes), h)])
        final.append(axes[:, h])
        rows.append(np.full(len(axes), i))
    return np.concatenate(rows), np.concatenate(coins), np.concatenate(final)


def _random_rows(trees, count: int, offset: int, setting: int):
    rng = np.random.Generator(np.random.PCG64([int(offset), int(setting)]))
    nodes = max(t.nodes for t in trees)
    total = count * len(trees)
    rows = np.arange(total) % len(trees)  # round-robin: every chunk mixes the shapes
    return rows, rng.random((total, nodes)), rng.random(total)


def _edges(trees):
    """Edge rows: coins at 0, every sibling CDF boundary and just below 1 (float64 and
    float32-rounded), finals at 0, 1/2, the root residual's CDF boundaries, just below 1."""
    nodes = max(t.nodes for t in trees)
    rows, coins, final = [], [], []
    for i, t in enumerate(trees):
        coin_values = {0.0, LAST_BELOW_ONE}
        for node in range(t.nodes):
            p = as_exact(t.p[node])
            acc = np.cumsum([p[t.tokens[c]] for c in t.children(node)]) if t.children(node) \
                else np.array([])  # fmt: skip
            coin_values.update(float(a) for a in acc if a < 1.0)
            coin_values.update(float(np.float32(a)) for a in acc if np.float32(a) < 1.0)
        p0 = as_exact(t.p[0])
        residual = p0.copy()
        residual[[t.tokens[c] for c in t.children(0)]] = 0.0
        cdf = np.cumsum(residual) / residual.sum() if residual.sum() > 0 else np.array([])
        final_values = {0.0, 0.5, LAST_BELOW_ONE} | {float(a) for a in cdf if a < 1.0}
        for v in sorted(coin_values):
            for f in sorted(final_values):
                rows.append(i)
                coins.append(np.full(nodes, v))
                final.append(f)
    return np.asarray(rows), np.asarray(coins), np.asarray(final)


def _run(kernel, trees, rows, coins, final) -> TreeOutput:
    nodes, vocab = max(t.nodes for t in trees), trees[0].vocab
    chunk = max(1, _MAX_CHUNK_ELEMENTS // (nodes * vocab))
    parts = []
    for s in range(0, len(rows), chunk):
        e = min(len(rows), s + chunk)
        parts.append(kernel.accept_tree(batch_of(trees, rows[s:e], coins[s:e], final[s:e])))
    return TreeOutput(*(np.concatenate([getattr(o, f) for o in parts])
                        for f in ("tokens", "path", "num_accepted", "error")))  # fmt: skip


def _counts(out: TreeOutput, rows, names, setting: int, source: str) -> pd.DataFrame:
    tok = [" ".join(str(int(x)) for x in r if x >= 0) for r in out.tokens]
    path = [" ".join(str(int(x)) for x in r if x >= 0) for r in out.path]
    tok = ["error" if e else t for t, e in zip(tok, out.error, strict=True)]
    frame = pd.DataFrame({"case": np.asarray(names)[rows], "tokens": tok, "path": path})
    counts = frame.groupby(["case", "tokens", "path"], sort=True).size().rename("count")
    counts = counts.reset_index()
    counts.insert(0, "source", source)
    counts.insert(0, "setting", setting)
    return counts
