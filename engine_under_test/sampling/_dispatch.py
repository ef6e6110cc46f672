"""Whether CUDA inputs may use the fused Triton kernels, and the lazy import of them.

Triton ships with CUDA builds of torch only, so `triton_kernels` is imported the first
time a CUDA tensor asks for it, never at package import. Every caller keeps a pure
torch path that is always correct; the Triton kernels are tested against it
(tests/engine/test_sampling_gpu.py): Philox bit for bit, the probabilities with the same
support and within 1e-6. ENGINE_UNDER_TEST_TRITON=0 switches them off for
a process, `set_triton_enabled(False)` at run time.

`speculative_accept` and `categorical` have their own switch, `sampling_kernel_for`
(kernels in triton_accept.py / triton_categorical.py, equal to the torch path for the
committed tokens): ENGINE_UNDER_TEST_SAMPLING, or `set_sampling_backend` at run time, is
  auto    (default) the Triton kernel for CUDA tensors when triton imports and
          ENGINE_UNDER_TEST_TRITON allows it, the torch path otherwise;
  torch   the torch path always (benchmarks and tests compare against it);
  triton  the Triton kernel always, CPU tensors included (only meaningful under
          TRITON_INTERPRET=1); an ImportError if triton is missing.
Float64 p or q and the kernel mutants stay on the torch path in every mode.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType

import torch

_state: dict[str, object] = {
    "enabled": os.environ.get("ENGINE_UNDER_TEST_TRITON", "1") != "0",
    "module": None,  # the triton_kernels module once imported, False if it cannot be
    "sampling": os.environ.get("ENGINE_UNDER_TEST_SAMPLING", "auto"),
}
SAMPLING_BACKENDS = ("auto", "torch", "triton")
# op name -> (module, function): the Triton twins of accept.py / categorical.py.
_SAMPLING_KERNELS = {
    "speculative_accept": ("triton_accept", "speculative_accept"),
    "categorical": ("triton_categorical", "categorical"),
}
_sampling_modules: dict[str, ModuleType | None] = {}


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


def set_sampling_backend(backend: str) -> None:
    """ "auto", "torch" or "triton" for speculative_accept and categorical (module doc)."""
    if backend not in SAMPLING_BACKENDS:
        raise ValueError(f"sampling backend must be one of {SAMPLING_BACKENDS}, got {backend!r}")
    _state["sampling"] = backend


def sampling_backend() -> str:
    backend = str(_state["sampling"])
    if backend not in SAMPLING_BACKENDS:  # a bad ENGINE_UNDER_TEST_SAMPLING value
        raise ValueError(
            f"ENGINE_UNDER_TEST_SAMPLING must be one of {SAMPLING_BACKENDS}, got {backend!r}"
        )
    return backend


def sampling_kernel_for(op: str, *tensors: torch.Tensor) -> Callable | None:
    """The Triton function for `op` ("speculative_accept" or "categorical") on these
    inputs (the first decides the device), or None when the torch path serves them."""
    backend = sampling_backend()
    if backend == "torch":
        return None
    if op == "speculative_accept" and any(t.dtype == torch.float64 for t in tensors):
        return None  # a float64 row sum may overflow where every entry is finite
    if backend == "auto" and not (tensors[0].is_cuda and _state["enabled"]):
        return None
    module_name, function = _SAMPLING_KERNELS[op]
    if module_name not in _sampling_modules:
        try:
            module = importlib.import_module(f"engine_under_test.sampling.{module_name}")
        except ImportError:
            if backend == "triton":
                raise
            module = None  # no triton in this environment: the torch path serves
        _sampling_modules[module_name] = module
    module = _sampling_modules[module_name]
    return None if module is None else getattr(module, function)
