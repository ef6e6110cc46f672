"""Request-owned randomness: Philox4x32-10 uniforms keyed by (seed, round).

Each random request owns a stream: its uniforms for a round are a pure function of
(seed, round, index), so they do not depend on which other requests share the batch,
which slot the request sits in, or how many drafts earlier rounds accepted. A request
draws one fixed block of `num_draws` (2K + 1) uniforms per submitted round; greedy
requests acquire nothing and their counter never moves.

The generator, Philox4x32-10 on int64 torch tensors (the same bits on CPU and CUDA), its
constants and the stream layout (key, counter, words to uniforms) are in `philox.py`.
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
from engine_under_test.sampling.philox import DOMAIN, MASK32, philox4x32_10, words_to_uniforms


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


def _key_and_counters(
    seeds: torch.Tensor, rounds: torch.Tensor, n_counters: int
) -> tuple[torch.Tensor, torch.Tensor]:  # [B] int64 x2 -> [B, 1, 2], [B, C, 4] int64
    """The stream layout (philox.py): each row's key words and its C counters."""
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
    return key, counter


# Columns of an origin row (``philox_origins``): the key's two words, the counter's four
# words, and which uniform of the counter's output (0: from words 0-1, 1: words 2-3).
ORIGIN_COLUMNS = ("key0", "key1", "counter0", "counter1", "counter2", "counter3", "word")


def philox_origins(seeds: torch.Tensor, rounds: torch.Tensor, n: int) -> torch.Tensor:
    """Where each uniform of ``philox_uniforms(seeds, rounds, n)`` comes from.

    seeds,    # [B] int64
    rounds,   # [B] int64, same device
    n,        # int >= 0
    returns   # [B, n, 7] int64: ORIGIN_COLUMNS of uniform i (counter i // 2, word i % 2)

    The same layout code as the generator itself (``_key_and_counters``), so a trace of
    origins names exactly the (key, counter) each uniform was computed from. Two
    uniforms are independent iff their origin rows differ (Philox is a bijection of the
    counter for each key). No host reads.
    """
    _check_streams(seeds, rounds, n)
    seeds, rounds = seeds.to(torch.int64), rounds.to(torch.int64)
    B = seeds.shape[0]
    key, counter = _key_and_counters(seeds, rounds, (n + 1) // 2)
    i = torch.arange(n, device=seeds.device)
    words = counter[:, i // 2, :]  # [B, n, 4]
    half = (i % 2).to(torch.int64)[None, :, None].expand(B, n, 1)
    return torch.cat([key.expand(B, n, 2), words, half], dim=-1)


def philox_uniforms_torch(seeds: torch.Tensor, rounds: torch.Tensor, n: int) -> torch.Tensor:
    """`philox_uniforms` in plain torch ops (the always-available path)."""
    _check_streams(seeds, rounds, n)
    seeds = seeds.to(torch.int64)
    rounds = rounds.to(torch.int64)
    B = seeds.shape[0]
    n_counters = (n + 1) // 2
    key, counter = _key_and_counters(seeds, rounds, n_counters)
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
