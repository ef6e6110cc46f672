"""FlashInfer's chain speculative sampling as a specconform kernel adapter (tested:
flashinfer-python 0.7.2.post1, the version vLLM 0.33.0 pins; CUDA only: its kernels are
JIT-compiled CUDA).

``flashinfer.sampling.chain_speculative_sampling(draft_probs [B, K, V], draft_token_ids
[B, K], target_probs [B, K+1, V], ..., deterministic=True, generator=...)`` returns
``(output_token_ids [B, K+1] padded with -1, output_accepted_token_num [B],
output_emitted_draft_token_num [B])``: the committed tokens and the number of drafts among
them (the middle count ignores the stop at the first rejection; unused here). It draws its own uniforms (Philox, from the
``generator``'s seed and offset) and takes none as input, so the adapter is black-box:
Monte Carlo only (``protocols/peers/flashinfer.yaml``).

- ``chain`` (black-box): one ``torch.Generator`` on the GPU, seeded from a digest of the
  protocol's uniforms for the first call (reproducible; another --offset, other draws).
  Rows of each draft length L run as one call with L drafts (FlashInfer's batches have
  one draft length).

Planted misuse (``mutant``): ``wrong_draft_temperature`` passes the draft probabilities at
temperature 0.5 (softmax(log q / 0.5)) while the drafts were drawn from q: the scored
q is not the law the drafts came from.
"""

from __future__ import annotations

import numpy as np

from specconform.adapters.kernel import KernelOutput
from specconform.adapters.peers import check_device, import_module, require, row_seeds
from specconform.util.errors import UsageError

DIST = "flashinfer-python"
TESTED_VERSION = "0.7.2.post1"
INSTALL = f"flashinfer-python=={TESTED_VERSION} (a CUDA machine with nvcc; see bench/peers_gpu.sh)"
MUTANTS = ("wrong_draft_temperature",)


def chain(device: str = "cuda", mutant: str | None = None):
    if mutant is not None and mutant not in MUTANTS:
        raise UsageError(
            f"--mutant {mutant}: the flashinfer adapter plants only {', '.join(MUTANTS)}"
        )
    if device != "cuda":
        raise UsageError("flashinfer: chain_speculative_sampling runs on CUDA only (--device cuda)")
    version = require(DIST, TESTED_VERSION, INSTALL)
    check_device(device)
    sampling = import_module("flashinfer.sampling", DIST, INSTALL)
    return FlashinferChain(sampling, mutant, version)


def tempered(q: np.ndarray, T: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        logq = np.where(q > 0, np.log(np.maximum(q, 1e-45)) / T, -np.inf)
    w = np.exp(logq - logq.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)


class FlashinferChain:
    def __init__(self, sampling, mutant, version, device: str = "cuda"):
        import torch

        self._device = device  # "cuda"; the CPU tests pass a stand-in sampling module
        self._torch = torch
        self._fn = sampling.chain_speculative_sampling
        self._gen = None
        self.mutant = mutant
        self.name = f"flashinfer {version} chain_speculative_sampling" + (
            f"[{mutant}]" if mutant else ""
        )

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        # p: [B, K+1, V] float32; q: [B, K, V] float32; drafts: [B, K] int64;
        # draft_lens: [B] int64; uniforms: [B, 2K+1] float64 (ignored: black-box)
        torch = self._torch
        B, K1, V = p.shape
        K = K1 - 1
        dev = self._device
        if self._gen is None:
            self._gen = torch.Generator(device=dev).manual_seed(row_seeds(uniforms, 0xF1))
        if self.mutant == "wrong_draft_temperature":
            q = tempered(q, 0.5)
        lens = np.asarray(draft_lens, np.int64)
        tokens = np.full((B, K + 1), -1, np.int64)
        num_accepted = np.zeros(B, np.int64)
        for L in np.unique(lens):
            rows = np.flatnonzero(lens == L)
            L = int(L)
            if L == 0:
                # No drafts: FlashInfer needs num_speculate_tokens >= 1; a request without
                # drafts is plain sampling from p_0, outside this kernel.
                tokens[rows, 0] = self._plain(p[rows, 0])
                continue
            on_device = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=dev)  # noqa: E731
            token_ids, _, emitted = self._fn(
                on_device(q[rows, :L], torch.float32),
                on_device(drafts[rows, :L], torch.int32),
                on_device(p[rows, : L + 1], torch.float32),
                deterministic=True,
                generator=self._gen,
            )
            tokens[rows, : L + 1] = token_ids.cpu().numpy().astype(np.int64)
            num_accepted[rows] = emitted.cpu().numpy().astype(np.int64)
        return KernelOutput(tokens, num_accepted, np.zeros(B, bool))

    def staged(self, p, q, drafts, uniforms):
        """Kernel-only timing: device tensors once, every row at draft length K; a
        zero-argument call of chain_speculative_sampling (outputs stay on the device)."""
        torch, dev = self._torch, self._device
        if self._gen is None:
            self._gen = torch.Generator(device=dev).manual_seed(row_seeds(uniforms, 0xF1))
        q_t = torch.as_tensor(np.ascontiguousarray(q), dtype=torch.float32, device=dev)
        d_t = torch.as_tensor(np.ascontiguousarray(drafts), dtype=torch.int32, device=dev)
        p_t = torch.as_tensor(np.ascontiguousarray(p), dtype=torch.float32, device=dev)
        gen = self._gen
        return lambda: self._fn(q_t, d_t, p_t, deterministic=True, generator=gen)

    def _plain(self, p0: np.ndarray) -> np.ndarray:
        torch = self._torch
        probs = torch.as_tensor(p0, dtype=torch.float32, device=self._device)
        return torch.multinomial(probs, 1, generator=self._gen)[:, 0].cpu().numpy()
