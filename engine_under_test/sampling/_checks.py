"""Host-side argument checks shared by the sampling core.

Every check reads tensor metadata only (shape, dtype, device), never values: reading
values would be a host sync, and these functions run on the async path too.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def require_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def require_ndim(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {layout}, got shape {tuple(t.shape)}")


def require_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be a floating tensor (float16/bfloat16/float32/float64), got {t.dtype}"
        )


def require_integer(name: str, t: torch.Tensor) -> None:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor (int64), got {t.dtype}")


def require_tensors(**named: object) -> None:
    """`require_tensor` for every argument, in order."""
    for name, value in named.items():
        require_tensor(name, value)


def require_law(name: str, t: torch.Tensor, ndim: int, layout: str) -> tuple[int, ...]:
    """A floating tensor of ``ndim`` dimensions whose last (the vocabulary, V) is >= 1:
    rows of logits or weights. Returns its shape."""
    require_ndim(name, t, ndim, layout)
    require_float(name, t)
    if t.shape[-1] < 1:
        raise ValueError(f"{name} must have a vocabulary of at least one token (V >= 1)")
    return tuple(t.shape)


def require_shape(
    name: str, t: torch.Tensor, shape: tuple[int, ...], layout: str, kind: str | None = None
) -> None:
    """``t.shape == shape``, then, where ``kind`` is "float" or "integer", its dtype."""
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must be {layout} = {tuple(shape)}, got {tuple(t.shape)}")
    if kind == "float":
        require_float(name, t)
    elif kind == "integer":
        require_integer(name, t)


def require_device(name: str, t: torch.Tensor, device: torch.device, ref: str) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but {ref} is on {device}: same device needed")


def require_same_device(ref: str, t: torch.Tensor, **named: torch.Tensor) -> None:
    """Every named tensor on ``t``'s device (``ref`` names ``t`` in the message)."""
    for name, other in named.items():
        require_device(name, other, t.device, ref)
