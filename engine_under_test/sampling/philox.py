"""The Philox4x32-10 counter-based generator on int64 torch tensors, and its constants.

Philox4x32-10 (Salmon et al., SC'11; the Random123 reference) runs here on int64 torch
tensors holding 32-bit words, so CPU and CUDA produce the same bits: every product of
two 32-bit words is split into 16-bit halves (each partial product < 2**48 fits int64
without signed overflow) and every result is masked back to 32 bits.

Stream layout:
  key     = (seed & 0xFFFFFFFF, seed >> 32)
  counter = (index, round & 0xFFFFFFFF, round >> 32, DOMAIN)
  one counter gives four words (w0, w1, w2, w3) and two uniforms, u[2*index] from
  (w0, w1) and u[2*index + 1] from (w2, w3), each ((a >> 5) * 2**26 + (b >> 6)) / 2**53:
  53 random bits, exactly representable, in [0, 1).

Below both users in the import order: `rng` (the streams and the torch path) and
`triton_philox` (the same bits in one Triton kernel, which takes the constants from
here) import it; it imports neither.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
PHILOX_M0 = 0xD2511F53  # multipliers and Weyl key increments from Random123
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
# The counter's fourth word: separates this engine's streams from any other use of
# the same (seed, round) with the same key ("SPEC" in ASCII).
DOMAIN = 0x53504543


def _mulhilo32(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of the 64-bit product a * m, a: int64 in [0, 2**32).

    a * m can reach 2**64 and overflow int64, so multiply m by a's 16-bit halves:
    t_hi = (a >> 16) * m and t_lo = (a & 0xFFFF) * m are both < 2**48, and
    a * m = t_hi * 2**16 + t_lo = (t_hi >> 16) * 2**32 + s with s < 2**49 below.
    """
    t_hi = (a >> 16) * m
    t_lo = (a & 0xFFFF) * m
    s = ((t_hi & 0xFFFF) << 16) + t_lo
    return (t_hi >> 16) + (s >> 32), s & MASK32


def philox4x32_10(counter: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """The Philox4x32-10 bijection, word for word as Random123's philox4x32.

    counter,  # [..., 4] int64, each word in [0, 2**32)
    key,      # [..., 2] int64, each word in [0, 2**32) (broadcasts against counter)
    returns   # [..., 4] int64 words in [0, 2**32)
    """
    c0, c1, c2, c3 = counter.unbind(-1)
    k0, k1 = key.unbind(-1)
    for r in range(PHILOX_ROUNDS):
        if r:  # the key is bumped before every round but the first
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mulhilo32(c0, PHILOX_M0)
        hi1, lo1 = _mulhilo32(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return torch.stack(torch.broadcast_tensors(c0, c1, c2, c3), dim=-1)


def words_to_uniforms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 uniforms in [0, 1) from pairs of 32-bit words (int64 tensors)."""
    bits53 = (a >> 5) * (1 << 26) + (b >> 6)  # < 2**53: exact in float64
    return bits53.double() * (1.0 / (1 << 53))  # scaling by a power of two is exact
