"""Per-depth KV cache: one namespace per (loop, layer).

The looped model applies the same layer stack R times; loop r's attention must only see
keys and values produced at loop r (Ouro keeps ``num_layers * total_ut_steps`` caches).
The draft (loops 0..d-1) therefore fills the shallow namespaces and verification the
deep ones (loops d..R-1); nothing is shared across depths.

Layout: ``k[r, l]`` is ``[S, G, Lmax, hd]`` (slot, kv head, position, head dim), so a
decode batch over slots 0..B-1 attends to the view ``k[r, l][:B]`` without a copy.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        num_loops: int,
        num_layers: int,
        num_slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ):
        shape = (num_loops, num_layers, num_slots, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # [R, L, S, G, Lmax, hd]
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def num_loops(self) -> int:
        return self.k.shape[0]

    @property
    def num_slots(self) -> int:
        return self.k.shape[2]

    @property
    def max_len(self) -> int:
        return self.k.shape[4]

    def layer(self, loop: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (k, v) namespace of one depth and layer: views [S, G, Lmax, hd]."""
        return self.k[loop, layer], self.v[loop, layer]
