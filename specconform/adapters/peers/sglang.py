"""SGLang's chain speculative sampling as a specconform kernel adapter (tested: sglang
0.5.23).

The kernel is ``chain_speculative_sampling_triton`` (module
``sglang/kernels/ops/speculative/reject_sampling.py``, Triton kernel
``speculative_sampling_classic_kernel``), called exactly as SGLang's EAGLE verify step
calls it (``sglang/srt/speculative/eagle_utils.py``): ``candidates [B, K+1]`` (slot 0
the last verified token, slots 1..K the drafts), ``retrive_index [B, K+1]`` (global
slots ``b * (K+1) + i``), ``target_probs [B, K+1, V]``, ``draft_probs [B, K, V]``, coins
``uniform_samples [B, K+1]`` float32 and ``uniform_samples_for_final_sampling [B]``
float32; the committed tokens are ``predicts[accept_index[b, 0..accept_token_num[b]]]``.
SGLang's package ``__init__`` imports its whole serving runtime, so the adapter loads
that one module file by path (it imports only triton).

The kernel takes its coins as inputs, so it is white-box (quadrature applies):

- ``chain`` (white-box): coin j = u_j (the protocol's accept coins), the one final coin
  (SGLang draws one for the correction *or* the bonus) = frac(u_K + u_2K) (the first
  correction uniform plus the bonus uniform, mod 1: uniform and independent of the coins;
  on the quadrature grids, where one of the two is held at 1/2, a permutation of the
  midpoint grid). Coins are cast to float32 and clamped to the largest float32 below 1,
  as SGLang's own seeded-coin path does (``_seeded_verify_coins``).
- ``chain_blackbox`` (Monte Carlo only): coins drawn as ``_verify_coins`` draws them
  without a sampling seed (``torch.rand`` float32), from the adapter's generator.

SGLang's verify step gives every request the same number of slots; the adapter runs rows
of each draft length L as their own call with L + 1 slots (the kernel's ``NUM_SLOTS``),
which is what a batch of requests with L drafts each is.

Planted misuse (``mutant``): ``unnormalised_target`` passes the target probabilities
after a top-k mask (the 2 smallest tokens of each row's support dropped) without
renormalising (SGLang's caller uses ``top_k_renorm_prob``): the kernel then samples a
law other than p.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from specconform.adapters.kernel import KernelOutput
from specconform.adapters.peers import check_device, interpret_on_cpu, require, row_seeds
from specconform.util.errors import UsageError

DIST = "sglang"
TESTED_VERSION = "0.5.23"
INSTALL = f"sglang=={TESTED_VERSION} --no-deps (make peers-test)"
MODULE_FILE = os.path.join("kernels", "ops", "speculative", "reject_sampling.py")
MUTANTS = ("unnormalised_target",)
MAX_COIN = np.float32(1.0 - 2.0**-24)


def _load(device: str, mutant: str | None):
    if mutant is not None and mutant not in MUTANTS:
        raise UsageError(f"--mutant {mutant}: the sglang adapter plants only {', '.join(MUTANTS)}")
    version = require(DIST, TESTED_VERSION, INSTALL)
    interpret_on_cpu(device, ("triton",) if "_sc_sglang_reject_sampling" not in _LOADED else ())
    check_device(device)
    return version, _module()


_LOADED: dict = {}


def _module():
    """sglang's reject_sampling.py, loaded by path without running sglang/__init__.py."""
    if "_sc_sglang_reject_sampling" in _LOADED:
        return _LOADED["_sc_sglang_reject_sampling"]
    spec = importlib.util.find_spec("sglang")
    roots = list(spec.submodule_search_locations or []) if spec else []
    path = os.path.join(roots[0], MODULE_FILE) if roots else ""
    if not os.path.isfile(path):
        raise UsageError(f"sglang: {MODULE_FILE} not found; install with: pip install {INSTALL}")
    mspec = importlib.util.spec_from_file_location("_sc_sglang_reject_sampling", path)
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    _LOADED["_sc_sglang_reject_sampling"] = module
    return module


def chain(device: str = "cpu", mutant: str | None = None):
    version, module = _load(device, mutant)
    return SglangChain(module, device, mutant, version, white_box=True)


def chain_blackbox(device: str = "cpu", mutant: str | None = None):
    version, module = _load(device, mutant)
    return SglangChain(module, device, mutant, version, white_box=False)


def _coins(u: np.ndarray) -> np.ndarray:
    return np.minimum(u.astype(np.float32), MAX_COIN)


def unnormalised_top_k(p: np.ndarray) -> np.ndarray:
    """The planted misuse: per row, zero the 2 smallest tokens of the support, no renorm."""
    out = p.copy()
    flat = out.reshape(-1, out.shape[-1])
    for row in flat:
        support = np.flatnonzero(row > 0)
        if support.size > 2:
            row[support[np.argsort(row[support], kind="stable")[:2]]] = 0.0
    return out


class SglangChain:
    def __init__(self, module, device, mutant, version, white_box):
        import torch

        self._torch = torch
        self._fn = module.chain_speculative_sampling_triton
        self._dev = torch.device(device)
        self.mutant = mutant
        self.white_box = white_box
        self._gen = None
        kind = "" if white_box else " (own coins)"
        self.name = f"sglang {version} chain_speculative_sampling_triton{kind}" + (
            f"[{mutant}]" if mutant else ""
        )

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        # p: [B, K+1, V] float32; q: [B, K, V] float32; drafts: [B, K] int64;
        # draft_lens: [B] int64; uniforms: [B, 2K+1] float64
        B, K1, _ = p.shape
        K = K1 - 1
        lens = np.asarray(draft_lens, np.int64)
        u = np.asarray(uniforms, np.float64)
        if self.mutant == "unnormalised_target":
            p = unnormalised_top_k(p)
        tokens = np.full((B, K + 1), -1, np.int64)
        num_accepted = np.zeros(B, np.int64)
        if not self.white_box and self._gen is None:
            self._gen = self._torch.Generator(device=self._dev).manual_seed(row_seeds(u, 0x5A))
        for L in np.unique(lens):
            rows = np.flatnonzero(lens == L)
            t, n = self._call(p[rows], q[rows], drafts[rows], int(L), u[rows], K)
            tokens[rows, : int(L) + 1] = t
            num_accepted[rows] = n
        return KernelOutput(tokens, num_accepted, np.zeros(B, bool))

    def staged(self, p, q, drafts, uniforms):
        """Kernel-only timing: the white-box call's inputs on the device once, every row
        at draft length K; a zero-argument call that allocates the outputs and launches
        chain_speculative_sampling_triton, as SGLang's verify does per step."""
        torch, dev = self._torch, self._dev
        b, K1, _ = p.shape
        K = K1 - 1
        u = np.asarray(uniforms, np.float64)
        candidates = np.zeros((b, K1), np.int64)
        candidates[:, 1:] = drafts
        coins = np.zeros((b, K1), np.float32)
        coins[:, :K] = _coins(u[:, :K])
        tensors = {
            "candidates": torch.as_tensor(candidates, device=dev),
            "retrive_index": torch.arange(b * K1, dtype=torch.int64, device=dev).reshape(b, K1),
            "uniform_samples": torch.as_tensor(coins, device=dev),
            "uniform_samples_for_final_sampling": torch.as_tensor(
                _coins(np.mod(u[:, K] + u[:, 2 * K], 1.0)), device=dev
            ),
            "target_probs": torch.as_tensor(np.ascontiguousarray(p), device=dev),
            "draft_probs": torch.as_tensor(np.ascontiguousarray(q), device=dev),
        }

        def launch():
            self._fn(
                predicts=torch.full((b * K1,), -1, dtype=torch.int32, device=dev),
                accept_index=torch.full((b, K1), -1, dtype=torch.int32, device=dev),
                accept_token_num=torch.zeros((b,), dtype=torch.int32, device=dev),
                retrive_next_token=None,
                retrive_next_sibling=None,
                threshold_single=1.0,
                threshold_acc=1.0,
                deterministic=True,
                **tensors,
            )

        return launch

    def _call(self, p, q, drafts, L, u, K):
        torch, dev = self._torch, self._dev
        b, V = p.shape[0], p.shape[-1]
        slots = L + 1
        candidates = np.zeros((b, slots), np.int64)
        candidates[:, 1:] = drafts[:, :L]
        if self.white_box:
            coins = np.zeros((b, slots), np.float32)
            coins[:, :L] = _coins(u[:, :L])
            final = _coins(np.mod(u[:, K] + u[:, 2 * K], 1.0))
            coins_t = torch.as_tensor(coins, device=dev)
            final_t = torch.as_tensor(final, device=dev)
        else:  # as eagle_utils._verify_coins without a sampling seed
            cand = torch.as_tensor(candidates, device=dev)
            coins_t = torch.rand(cand.shape, dtype=torch.float32, generator=self._gen).to(dev)
            final_t = torch.rand((b,), dtype=torch.float32, generator=self._gen).to(dev)
        predicts = torch.full((b * slots,), -1, dtype=torch.int32, device=dev)
        accept_index = torch.full((b, slots), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros((b,), dtype=torch.int32, device=dev)
        retrive_index = torch.arange(b * slots, dtype=torch.int64, device=dev).reshape(b, slots)
        qs = q[:, : max(L, 1)]
        self._fn(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_num,
            candidates=torch.as_tensor(candidates, device=dev),
            retrive_index=retrive_index,
            retrive_next_token=None,
            retrive_next_sibling=None,
            uniform_samples=coins_t.contiguous(),
            uniform_samples_for_final_sampling=final_t.contiguous(),
            target_probs=torch.as_tensor(np.ascontiguousarray(p[:, :slots]), device=dev),
            draft_probs=torch.as_tensor(np.ascontiguousarray(qs), device=dev),
            threshold_single=1.0,
            threshold_acc=1.0,
            deterministic=True,
        )
        n = accept_num.cpu().numpy().astype(np.int64)
        idx = accept_index.cpu().numpy().astype(np.int64)
        pred = predicts.cpu().numpy().astype(np.int64)
        tokens = np.full((b, slots), -1, np.int64)
        for i in range(b):
            tokens[i, : n[i] + 1] = pred[idx[i, : n[i] + 1]]
        del V
        return tokens, n
