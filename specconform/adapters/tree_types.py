"""What a tree kernel receives and returns (see `specconform.adapters.tree`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TreeBatch:
    tokens: np.ndarray  # [B, N] int64 candidate token per node (root and padding: 0)
    next_token: np.ndarray  # [B, N] int64 first child, -1: none
    next_sibling: np.ndarray  # [B, N] int64 next sibling, -1: none
    p: np.ndarray  # [B, N, V] float32 target law after each node
    coins: np.ndarray  # [B, N] float64 in [0, 1): the coin of node n picks among its children
    final: np.ndarray  # [B] float64 in [0, 1): the last committed token's draw
    depth: int  # most accepted candidates in any row (the batch's tallest tree)


@dataclass(frozen=True)
class TreeOutput:
    tokens: np.ndarray  # [B, depth + 1] int64 committed tokens, -1 padded
    path: np.ndarray  # [B, depth] int64 accepted node indices, -1 padded
    num_accepted: np.ndarray  # [B] int64
    error: np.ndarray  # [B] bool: invalid final law (zero residual)
