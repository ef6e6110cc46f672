"""Planted bugs that act only past the first draft position (``MutantHooks`` calls these).

Each leaves t1 (prefill) and the first draft position of the first decode round exactly
as the clean engine computes them, so a test of t1 and t2 alone cannot see it; each acts
only where its registry entry (``engine_under_test.mutants``) says: at draft positions
j >= 1, from a given decode round on, after a partial accept, in a reused slot or in a
mixed greedy/random batch. Every function is a pure device computation on the round's
tensors (no host reads), except the slot bookkeeping of ``StaleParams``, which is host
state written to the device the same way admission writes parameters.

"Decode round" is the request's own index, 0-based as in ``RequestOutput.rounds``: the
prefill draws RNG round 0, so after a round's draw the counter of a random row reads
index + 2 (``decode_round``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..params import SamplingParams
from ..sampling import batched_probabilities
from .state import SlotState


class RowParams(NamedTuple):
    """The per-row sampling parameters a round read (rows 0..B-1)."""

    temperature: torch.Tensor  # [B] float32
    top_k: torch.Tensor  # [B] int64
    top_p: torch.Tensor  # [B] float32
    live: torch.Tensor  # [B] bool


def decode_round(rng_round: torch.Tensor) -> torch.Tensor:  # [B] int64 counters after draw
    """The decode-round index of each random row whose block was just drawn."""
    return rng_round - 2


def _per_position(t: torch.Tensor, n: int) -> torch.Tensor:  # [B] -> [B * n]
    return t[:, None].expand(t.shape[0], n).reshape(-1)


def _deep(p: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:  # [B, K+1, V], [B] bool
    """[B, K+1, 1] bool: positions j >= 1 of the given rows."""
    j = torch.arange(p.shape[1], device=p.device)
    return (rows[:, None] & (j[None, :] >= 1))[..., None]


def _law(logits: torch.Tensor, temperature, top_k, top_p) -> torch.Tensor:
    """batched_probabilities over [B, K+1, V] logits with per-row parameters [B]."""
    B, K1, V = logits.shape
    return batched_probabilities(
        logits.reshape(B * K1, V),
        _per_position(temperature, K1),
        _per_position(top_k, K1),
        _per_position(top_p, K1),
    ).view(B, K1, V)


def deep_position_temp(p, logits, params: RowParams, random):
    """p at positions j >= 1 built at temperature 1 (top-k/top-p kept)."""
    plain = _law(logits, torch.ones_like(params.temperature), params.top_k, params.top_p)
    return torch.where(_deep(p, random), plain, p)


def filter_order_temp(p, logits, params: RowParams, random):
    """p at positions j >= 1: the top-k/top-p support chosen on the logits before the
    division by T, then the softmax of logits / T over that support. Top-k is blind to
    the order (scaling keeps the ranking); top-p is not, at T != 1."""
    support = _law(logits, torch.ones_like(params.temperature), params.top_k, params.top_p) > 0
    scaled = logits / params.temperature.clamp_min(1e-30)[:, None, None]
    wrong = torch.softmax(scaled.masked_fill(~support, float("-inf")), dim=-1)
    return torch.where(_deep(p, random), wrong, p)


def top_p_drop_crossing(p, params: RowParams, random):
    """p at positions j >= 1 of rows with top_p < 1: the crossing token (the last one of
    the kept prefix in the stable descending order: the least probable kept token,
    the highest index among ties) is dropped when more than one token survives, and the
    rest renormalised."""
    V = p.shape[-1]
    kept = p > 0
    least = torch.where(kept, p, float("inf")).amin(dim=-1, keepdim=True)
    columns = torch.arange(V, device=p.device)
    crossing = torch.where(kept & (p == least), columns, -1).amax(dim=-1, keepdim=True)
    dropped = torch.where(columns == crossing, 0.0, p)
    dropped = dropped / dropped.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    rows = random & (params.top_p < 1.0)
    act = _deep(p, rows) & (kept.sum(dim=-1, keepdim=True) > 1)
    return torch.where(act, dropped, p)


def bonus_after_accepts(p, draft_lens, random):
    """Rows with L >= 2: p at the bonus position L replaced by p at L - 1 (p at L is
    read for the bonus only, so nothing else moves)."""
    K1 = p.shape[1]
    at_bonus = torch.arange(K1, device=p.device)[None, :] == draft_lens[:, None]
    before = p.gather(1, (draft_lens - 1).clamp(0, K1 - 1)[:, None, None].expand(-1, 1, p.shape[2]))
    act = (random & (draft_lens >= 2))[:, None] & at_bonus
    return torch.where(act[..., None], before, p)


def greedy_row_sampled(p, logits, draft_lens, params: RowParams, random):
    """In a batch with a random row, greedy rows at accept positions 1 <= j < L get the
    softmax of their logits (the random rule's law) instead of their one-hot: with their
    zero coins every draft there with p > 0 is accepted. Position 0 and the bonus keep
    the greedy law; greedy-only batches are untouched."""
    greedy = params.live & ~random & random.any()  # a device test, no host read
    K1 = p.shape[1]
    j = torch.arange(K1, device=p.device)[None, :]
    act = greedy[:, None] & (j >= 1) & (j < draft_lens[:, None])
    return torch.where(act[..., None], torch.softmax(logits, dim=-1), p)


def next_input_partial(last, drafts, draft_lens, num_accepted, random):
    """After a partial accept (0 < s < L) the next input is the last accepted draft."""
    s = num_accepted
    partial = random & (s > 0) & (s < draft_lens)
    last_accepted = drafts.gather(1, (s - 1).clamp_min(0)[:, None]).squeeze(1)
    return torch.where(partial, last_accepted, last)


class StaleParams:
    """slot_stale_params: a request admitted into a slot that held another request
    keeps that occupant's temperature/top-k/top-p for its first decode round.

    Host bookkeeping only: the last parameters written to each slot. After a prefill
    (which used the right parameters) the reused slots get the old ones; after the next
    round was submitted the right ones come back. Both writes are stream-ordered device
    copies, like admission's."""

    def __init__(self) -> None:
        self.last: dict[int, SamplingParams] = {}
        self.pending: list[tuple[int, SamplingParams]] = []

    def after_prefill(self, state: SlotState, admitted) -> None:
        # A pending restore of a slot admitted again now is superseded by admission's
        # own write (which ran before this prefill); the others still need it.
        slots = {req.slot for req in admitted}
        self.pending = [(s, p) for s, p in self.pending if s not in slots]
        self.restore(state)
        stale = []
        for req in admitted:
            old = self.last.get(req.slot)
            self.last[req.slot] = req.params
            if old is not None and req.seed is not None:
                stale.append((req.slot, old))
                self.pending.append((req.slot, req.params))
        _write(state, stale)

    def restore(self, state: SlotState) -> None:
        _write(state, self.pending)
        self.pending = []


def _write(state: SlotState, entries: list[tuple[int, SamplingParams]]) -> None:
    if not entries:
        return
    idx = state.upload([s for s, _ in entries], torch.int64)
    ps = [p for _, p in entries]
    state.temperature.index_copy_(0, idx, state.upload([p.temperature for p in ps], torch.float32))
    state.top_k.index_copy_(0, idx, state.upload([p.top_k for p in ps], torch.int64))
    state.top_p.index_copy_(0, idx, state.upload([p.top_p for p in ps], torch.float32))
