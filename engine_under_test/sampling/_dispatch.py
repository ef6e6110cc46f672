"""Whether CUDA inputs may use the fused Triton kernels, and the lazy import of them.

Triton ships with CUDA builds of torch only, so `triton_kernels` is imported the first
time a CUDA tensor asks for it, never at package import. Every caller keeps a pure
torch path that is always correct; the Triton kernels are tested against it
(tests/engine/test_sampling_gpu.py): Philox bit for bit, the probabilities with the same
support and within 1e-6. ENGINE_UNDER_TEST_TRITON=0 switches them off for
a process, `set_triton_enabled(False)` at run time.
"""
from __future__ import annotations

import os
from types import ModuleType

import torch

_state: dict[str, object] = {
    "enabled": os.environ.get("ENGINE_UNDER_TEST_TRITON", "1") != "0",
    "module": None,  # the triton_kernels module once imported, False if it cannot be
}


def set_triton_enabled(enabled: bool) -> None:
    """Allow (True) or forbid (False) the fused Triton kernels on CUDA inputs."""
    _state["enabled"] = bool(enabled)


def triton_kernels_for(t: torch.Tensor) -> ModuleType | None:
    """The triton_kernels module when `t` is on CUDA and the kernels may run, else None."""
    if not (t.is_cuda and _state["enabled"]):
        return None
    if _state["module"] is None:
        try:
            from engine_under_test.sampling import triton_kernels
        except ImportError:  # no triton in this environment: the torch path serves
            _state["module"] = False
        else:
            _state["module"] = triton_kernels
    return _state["module"] or None
