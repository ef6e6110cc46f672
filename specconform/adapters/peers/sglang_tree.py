"""SGLang's tree speculative sampling as a specconform tree-kernel adapter (issue 34;
tested: sglang 0.5.23, CUDA only).

The kernel is ``tree_speculative_sampling_target_only`` (module
``sglang/kernels/ops/speculative/sampling.py``: a CUDA kernel JIT-built by SGLang's
``load_jit`` through apache-tvm-ffi on FlashInfer's headers), called as SGLang's EAGLE
verify step calls it: ``candidates``, ``retrive_index``, ``retrive_next_token``,
``retrive_next_sibling`` [B, N] int64 (node 0 the last verified token), coins
``uniform_samples`` [B, N] float32 (the coin of node n decides among n's children),
``uniform_samples_for_final_sampling`` [B] float32, ``target_probs`` [B, N, V] float32 and
``draft_probs`` zeros of the same shape (target only: the kernel writes the refused
children's target mass there and samples the last token from relu(target - draft));
``accept_index`` [B, depth + 1] int32, ``accept_token_num`` [B] int32, ``predicts``
[B * N] int32. Committed tokens: ``predicts[accept_index[b, 0..accept_token_num[b]]]``;
the accepted path: ``accept_index[b, 1..]`` less b * N.

White-box: the protocol's uniforms are the kernel's coins (cast to float32 and clamped to
the largest float32 below 1, as SGLang's seeded-coin path does). ``threshold_single`` and
``threshold_acc`` come from the protocol's settings (1 and 1: exact). The kernel has no
error flag: a final token outside the vocabulary (its answer to a zero residual) is
reported as the row's error.

SGLang's package ``__init__`` imports its whole serving runtime; on the GPU machine
bench/peers_gpu.sh (target ``sglang-tree``) installs a source subset whose
``sglang/__init__.py`` is empty, with FlashInfer's headers, apache-tvm-ffi and msgspec.
"""

from __future__ import annotations

import numpy as np

from specconform.adapters.peers import check_device, import_module, require
from specconform.adapters.tree_types import TreeBatch, TreeOutput
from specconform.util.errors import UsageError

DIST = "sglang"
TESTED_VERSION = "0.5.23"
INSTALL = f"sglang=={TESTED_VERSION} (GPU only: bash bench/peers_gpu.sh run sglang-tree)"
MODULE = "sglang.kernels.ops.speculative.sampling"
MAX_COIN = np.float32(1.0 - 2.0**-24)


def tree(device: str = "cuda", mutant: str | None = None, threshold_single: float = 1.0,
         threshold_acc: float = 1.0):  # fmt: skip
    if mutant is not None:
        raise UsageError(f"--mutant {mutant}: the sglang tree adapter plants no bug")
    if device != "cuda":
        raise UsageError("sglang's tree kernel is CUDA only: run with --device cuda")
    version = require(DIST, TESTED_VERSION, INSTALL)
    check_device(device)
    module = import_module(MODULE, DIST, INSTALL)
    return SglangTree(module, version, float(threshold_single), float(threshold_acc))


def _coins(u: np.ndarray) -> np.ndarray:
    return np.minimum(np.asarray(u, np.float64).astype(np.float32), MAX_COIN)


class SglangTree:
    def __init__(self, module, version: str, threshold_single: float, threshold_acc: float):
        import torch

        self._torch = torch
        self._fn = module.tree_speculative_sampling_target_only
        self.ts, self.ta = threshold_single, threshold_acc
        lossy = "" if (self.ts, self.ta) == (1.0, 1.0) else f" ts={self.ts:g} ta={self.ta:g}"
        self.name = f"sglang {version} tree_speculative_sampling_target_only{lossy}"

    def accept_tree(self, b: TreeBatch) -> TreeOutput:
        torch = self._torch
        dev = torch.device("cuda")
        B, N = b.tokens.shape
        D, V = b.depth, b.p.shape[-1]

        def t(a, dtype):
            return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=dev)

        predicts = torch.full((B * N,), -1, dtype=torch.int32, device=dev)
        accept_index = torch.full((B, D + 1), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros((B,), dtype=torch.int32, device=dev)
        self._fn(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_num,
            candidates=t(b.tokens, torch.int64),
            retrive_index=t(np.arange(B * N).reshape(B, N), torch.int64),
            retrive_next_token=t(b.next_token, torch.int64),
            retrive_next_sibling=t(b.next_sibling, torch.int64),
            uniform_samples=t(_coins(b.coins), torch.float32),
            uniform_samples_for_final_sampling=t(_coins(b.final), torch.float32),
            target_probs=t(b.p, torch.float32),
            draft_probs=torch.zeros((B, N, V), dtype=torch.float32, device=dev),
            threshold_single=self.ts,
            threshold_acc=self.ta,
            deterministic=True,
        )
        n = accept_num.cpu().numpy().astype(np.int64)
        idx = accept_index.cpu().numpy().astype(np.int64)
        pred = predicts.cpu().numpy().astype(np.int64)
        tokens = np.full((B, D + 1), -1, np.int64)
        path = np.full((B, D), -1, np.int64)
        error = np.zeros(B, bool)
        for i in range(B):
            committed = pred[idx[i, : n[i] + 1]]
            path[i, : n[i]] = idx[i, 1 : n[i] + 1] - i * N
            if not 0 <= committed[-1] < V:  # no valid final token (a zero residual)
                error[i] = True
                committed = committed[:-1]
            tokens[i, : len(committed)] = committed
        return TreeOutput(tokens, path, n, error)
