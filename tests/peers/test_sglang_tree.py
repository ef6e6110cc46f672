"""SGLang 0.5.23's tree sampler (specconform/adapters/peers/sglang_tree.py; issue 34) on a
CUDA GPU: tree_speculative_sampling_target_only, JIT-built by SGLang's load_jit.

Run by ``bash bench/peers_gpu.sh run sglang-tree`` (which installs the source subset);
skipped with the install line where sglang or a GPU is missing. Deterministic checks
(quadrature over the coins, the structure rules) need no alpha; the lossy one compares
the kernel with specconform's reference sampler on the same coins.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from specconform.adapters.peers import sglang_tree as peer
from specconform.adapters.tree import CheckedTreeKernel, batch_of
from specconform.adapters.tree_reference import ReferenceTree
from specconform.kinds.tree.laws import tree_of
from tests.toolkit.tree_helpers import run_tree

pytestmark = pytest.mark.gpu

# find_spec, not importorskip: a full `import sglang` pulls in its whole serving runtime.
if importlib.util.find_spec("sglang") is None:
    pytest.skip(f"sglang is not installed: {peer.INSTALL}", allow_module_level=True)
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip(f"no CUDA device: sglang's tree kernel is CUDA only ({peer.INSTALL})",
                allow_module_level=True)  # fmt: skip

CASE = {
    "vocab": 8,
    "parents": [-1, 0, 0, 0, 2, 2],
    "tokens": [-1, 5, 2, 1, 0, 6],
    "laws": [
        [0.10, 0.15, 0.25, 0.05, 0.10, 0.0, 0.20, 0.15],
        [1, 1, 1, 1, 1, 1, 1, 1],
        [0.20, 0.05, 0.10, 0.10, 0.05, 0.10, 0.30, 0.10],
        [0.30, 0.10, 0.0, 0.0, 0.20, 0.20, 0.10, 0.10],
        [0.05, 0.05, 0.40, 0.10, 0.10, 0.10, 0.10, 0.10],
        [0.0, 0.50, 0.0, 0.25, 0.0, 0.25, 0.0, 0.0],
    ],
}


def _batch(n, seed):
    tree = tree_of(CASE)
    rng = np.random.Generator(np.random.PCG64(seed))
    # float32-representable uniforms, so the kernel's coins equal the reference's
    coins = rng.random((n, tree.nodes)).astype(np.float32).astype(np.float64)
    final = rng.random(n).astype(np.float32).astype(np.float64)
    return batch_of([tree], np.zeros(n, np.int64), coins, final)


# threshold_single 0.35: no candidate's mass equals it (the reference compares normalised
# float64 mass, SGLang raw float32: a tie could round either way)
@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (0.35, 1.0), (1.0, 0.5)])
def test_kernel_agrees_with_the_reference_rule_row_by_row(ts, ta):
    """Same coins, same rule (docs/tree.md): the committed tokens and paths of SGLang's
    kernel equal the reference sampler's, except on rows whose coin lies within float32
    rounding of a boundary (none at these seeds is asserted below: at most 0.1%)."""
    b = _batch(20_000, seed=5)
    ref = ReferenceTree(None, ts, ta).accept_tree(b)
    got = CheckedTreeKernel(peer.tree(device="cuda", threshold_single=ts, threshold_acc=ta),
                            "sglang_tree").accept_tree(b)  # fmt: skip
    same = (got.tokens == ref.tokens).all(axis=1) & (got.path == ref.path).all(axis=1)
    assert same.mean() > 0.999, (ts, ta, same.mean())


def test_grid_protocol_at_default_thresholds():
    evaluation, _ = run_tree("peers/sglang_tree")
    bad = [(t.test, t.status, t.reason) for t in evaluation.tests if t.status != "PASS"]
    assert evaluation.verdict.verdict == "PASS", bad


def test_duplicate_siblings_are_double_counted():
    """Outside SGLang's precondition (EAGLE's siblings are distinct): the kernel behaves as
    specconform's planted tree_duplicate_counted mutant, so the grid protocol fails."""
    evaluation, _ = run_tree("peers/sglang_tree_duplicates")
    assert evaluation.verdict.verdict == "FAIL"
    mutant, _ = run_tree("tree", mutant="tree_duplicate_counted")
    assert any(t.status == "FAIL" for t in mutant.tests if t.test.startswith("duplicates"))
