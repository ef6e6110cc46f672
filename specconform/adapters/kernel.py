"""Kernel adapters: the bundled engine's `speculative_accept`, or a user's accept function."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from specconform.errors import UsageError


@dataclass(frozen=True)
class KernelOutput:
    tokens: np.ndarray        # [B, K+1] int64, committed tokens, -1 padded
    num_accepted: np.ndarray  # [B] int64
    error: np.ndarray         # [B] bool


class BundledKernel:
    """engine_under_test's sampling core, optionally with a planted kernel bug."""

    def __init__(self, device: str = "cpu", mutant: str | None = None):
        import torch

        from engine_under_test.sampling import speculative_accept

        if device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available on this machine")
        self._torch = torch
        self._accept = speculative_accept
        self.device = torch.device(device)
        self.mutant = mutant
        self.name = "engine_under_test.speculative_accept" + (f"[{mutant}]" if mutant else "")

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        t = self._torch
        dev = self.device
        out = self._accept(
            t.as_tensor(p, device=dev), t.as_tensor(q, device=dev),
            t.as_tensor(drafts, dtype=t.int64, device=dev),
            t.as_tensor(draft_lens, dtype=t.int64, device=dev),
            t.as_tensor(uniforms, dtype=t.float64, device=dev),
            mutant=self.mutant)
        return KernelOutput(out.tokens.cpu().numpy(), out.num_accepted.cpu().numpy(),
                            out.error.cpu().numpy().astype(bool))


def kernel_mutants() -> dict[str, object]:
    from engine_under_test.mutants import list_mutants

    return {m.name: m for m in list_mutants() if m.layer == "kernel"}


def load_kernel(adapter: str, device: str, mutant: str | None):
    """Resolve a protocol's `sampler.adapter`: "bundled" or "package.module:factory"
    (a factory called with device= and mutant= returning an object with `accept`)."""
    if adapter == "bundled":
        if mutant is not None and mutant not in kernel_mutants():
            from engine_under_test.mutants import MUTANTS

            if mutant in MUTANTS:
                raise UsageError(f"--mutant {mutant}: an engine mutant; kernel protocols test "
                                 f"only kernel mutants ({', '.join(sorted(kernel_mutants()))})")
            raise UsageError(f"--mutant {mutant}: unknown mutant; `specconform mutants` "
                             "lists them")
        return BundledKernel(device, mutant)
    module_name, _, attr = adapter.partition(":")
    if not attr:
        raise UsageError(f"sampler.adapter {adapter!r}: expected 'bundled' or 'module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"sampler.adapter {adapter!r}: cannot import: {exc}") from None
    return factory(device=device, mutant=mutant)
