"""Request-owned randomness: Philox4x32-10 uniforms keyed by (seed, round).

Each random request owns a stream: its uniforms for a round are a pure function of
(seed, round, index), so they do not depend on which other requests share the batch,
which slot the request sits in, or how many drafts earlier rounds accepted. A request
draws one fixed block of `num_draws` (2K + 1) uniforms per submitted round; greedy
requests acquire nothing and their counter never moves.

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
"""

from __future__ import annotations

import torch

from engine_under_test.params import SEED_LIMIT
from engine_under_test.sampling._checks import (
    require_device,
    require_integer,
    require_ndim,
    require_shape,
    require_tensor,
)
from engine_under_test.sampling._dispatch import triton_kernels_for

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


def _check_streams(seeds, rounds, n) -> None:
    require_tensor("seeds", seeds)
    require_tensor("rounds", rounds)
    require_ndim("seeds", seeds, 1, "[B]")
    require_integer("seeds", seeds)
    require_shape("rounds", rounds, tuple(seeds.shape), "[B]")
    require_integer("rounds", rounds)
    require_device("rounds", rounds, seeds.device, "seeds")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")


def philox_uniforms_torch(seeds: torch.Tensor, rounds: torch.Tensor, n: int) -> torch.Tensor:
    """`philox_uniforms` in plain torch ops (the always-available path)."""
    _check_streams(seeds, rounds, n)
    seeds = seeds.to(torch.int64)
    rounds = rounds.to(torch.int64)
    B = seeds.shape[0]
    n_counters = (n + 1) // 2
    index = torch.arange(n_counters, dtype=torch.int64, device=seeds.device)
    counter = torch.stack(
        torch.broadcast_tensors(
            index[None, :],
            (rounds & MASK32)[:, None],
            ((rounds >> 32) & MASK32)[:, None],
            torch.full((1, 1), DOMAIN, dtype=torch.int64, device=seeds.device),
        ),
        dim=-1,
    )  # [B, C, 4]
    key = torch.stack([seeds & MASK32, (seeds >> 32) & MASK32], dim=-1)[:, None, :]  # [B,1,2]
    words = philox4x32_10(counter, key)  # [B, C, 4]
    pairs = torch.stack(
        [
            words_to_uniforms(words[..., 0], words[..., 1]),
            words_to_uniforms(words[..., 2], words[..., 3]),
        ],
        dim=-1,
    )
    return pairs.reshape(B, 2 * n_counters)[:, :n].contiguous()


def philox_uniforms(seeds: torch.Tensor, rounds: torch.Tensor, n: int) -> torch.Tensor:
    """n float64 uniforms per row from the row's (seed, round) Philox stream.

    seeds,    # [B] int64 in [0, 2**63)
    rounds,   # [B] int64 >= 0, same device
    n,        # int >= 0, uniforms per row
    returns   # [B, n] float64 in [0, 1); bit-identical on CPU and CUDA

    No host reads. On CUDA the fused Triton kernel is used when it imports (it is
    tested bit-identical to the torch ops); elsewhere the torch ops.
    """
    _check_streams(seeds, rounds, n)
    kernels = triton_kernels_for(seeds)
    if kernels is not None:
        return kernels.philox_uniforms(seeds.to(torch.int64), rounds.to(torch.int64), n)
    return philox_uniforms_torch(seeds, rounds, n)


class RngRegistry:
    """Per-slot Philox streams held in device tensors.

    seed,         # [max_slots] int64: the bound request's seed
    round,        # [max_slots] int64: its next round counter
    random_mask,  # [max_slots] bool: slot bound to a random (seeded) request

    `bind` / `release` are host calls made at admission and finish (they write device
    tensors, never read them). `draw` and `rewind` run on the async path and inside
    CUDA Graph capture: they only update these preallocated tensors in place.
    """

    def __init__(self, num_draws: int, max_slots: int, device: torch.device | str = "cpu"):
        if not isinstance(num_draws, int) or isinstance(num_draws, bool) or num_draws < 1:
            raise ValueError(f"num_draws must be an int >= 1, got {num_draws!r}")
        if not isinstance(max_slots, int) or isinstance(max_slots, bool) or max_slots < 1:
            raise ValueError(f"max_slots must be an int >= 1, got {max_slots!r}")
        self.num_draws = num_draws
        self.max_slots = max_slots
        self.seed = torch.zeros(max_slots, dtype=torch.int64, device=device)
        self.round = torch.zeros(max_slots, dtype=torch.int64, device=device)
        self.random_mask = torch.zeros(max_slots, dtype=torch.bool, device=device)
        # The tensors' own device: "cuda" resolves to "cuda:<current>", which is what
        # callers' tensors report.
        self.device = self.seed.device

    def _check_slot(self, slot: int) -> None:
        if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < self.max_slots:
            raise ValueError(f"slot must be an int in [0, {self.max_slots}), got {slot!r}")

    def bind(self, slot: int, seed: int) -> None:
        """Give `slot` to a random request with `seed`; its stream starts at round 0."""
        self.bind_many([slot], [seed])

    def bind_many(self, slots: list[int], seeds: list[int]) -> None:
        """``bind`` for many slots at once: one upload instead of three writes per slot
        (admitting thousands of requests is otherwise launch-bound on a GPU)."""
        if len(slots) != len(seeds):
            raise ValueError(f"bind_many: {len(slots)} slots but {len(seeds)} seeds")
        for slot, seed in zip(slots, seeds, strict=True):
            self._check_slot(slot)
            if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_LIMIT:
                raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
        if len(set(slots)) != len(slots):
            raise ValueError("bind_many: a slot is listed twice")
        if not slots:
            return
        idx = self._upload(slots)
        self.seed.index_copy_(0, idx, self._upload(seeds))
        self.round.index_fill_(0, idx, 0)
        self.random_mask.index_fill_(0, idx, True)

    def release(self, slot: int) -> None:
        """Free `slot`: it draws zeros and never advances until bound again."""
        self.release_many([slot])

    def release_many(self, slots: list[int]) -> None:
        """``release`` for many slots at once (one upload)."""
        for slot in slots:
            self._check_slot(slot)
        if not slots:
            return
        idx = self._upload(slots)
        self.seed.index_fill_(0, idx, 0)
        self.round.index_fill_(0, idx, 0)
        self.random_mask.index_fill_(0, idx, False)

    def _upload(self, values: list[int]) -> torch.Tensor:
        """[n] int64 on the registry's device, through pinned memory on CUDA (the copy
        is ordered on the current stream; no host synchronisation)."""
        host = torch.tensor(values, dtype=torch.int64)
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host

    def _rows(self, slots, random_mask) -> torch.Tensor:
        require_tensor("slots", slots)
        require_ndim("slots", slots, 1, "[B]")
        require_integer("slots", slots)
        require_device("slots", slots, self.device, "the registry")
        mask = self.random_mask.index_select(0, slots)
        if random_mask is not None:
            require_tensor("random_mask", random_mask)
            require_shape("random_mask", random_mask, tuple(slots.shape), "[B]")
            if random_mask.dtype != torch.bool:
                raise ValueError(f"random_mask must be a bool tensor, got {random_mask.dtype}")
            require_device("random_mask", random_mask, self.device, "the registry")
            mask = mask & random_mask
        return mask

    def draw(self, slots: torch.Tensor, random_mask: torch.Tensor | None = None) -> torch.Tensor:
        """One round's uniforms for each row, then advance the random rows' counters.

        slots,        # [B] int64 slot of each row (no slot twice)
        random_mask,  # [B] bool or None: rows that sample randomly; None means every
                      #     row whose slot is bound. Rows whose slot is unbound are
                      #     greedy either way.
        returns       # [B, num_draws] float64; zeros on greedy rows
        """
        mask = self._rows(slots, random_mask)
        uniforms = philox_uniforms(
            self.seed.index_select(0, slots), self.round.index_select(0, slots), self.num_draws
        )
        uniforms = torch.where(mask[:, None], uniforms, 0.0)
        self.round.index_add_(0, slots, mask.to(torch.int64))
        return uniforms

    def rewind(self, slots: torch.Tensor, random_mask: torch.Tensor | None = None) -> None:
        """Undo one `draw` for these rows (a failed round: failed slots do not advance).

        slots,        # [B] int64, as passed to the draw being undone
        random_mask,  # [B] bool or None: rows to rewind (masked like `draw`)
        """
        mask = self._rows(slots, random_mask)
        self.round.index_add_(0, slots, -mask.to(torch.int64))
