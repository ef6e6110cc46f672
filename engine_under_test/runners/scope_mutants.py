"""Planted bugs that act only in one configuration, at a stop, or in one random stream.

``MutantHooks`` calls these (issue 35). Each is invisible to a protocol that never
reaches what it names, which is the point: a protocol that kills them covers the
sampling configurations, the stop rules and the stream layout, not only the default.

- ``filter_order_top_p_first``: rows with top-k *and* top-p on (either alone is blind to
  the order) get a target law whose support is top-p of the full softmax, then top-k of
  its survivors. The contract (docs/contracts.md, section 1) applies top-k first and
  top-p to the renormalised top-k law, which keeps a prefix of at most as many tokens:
  the wrong order keeps min(k, n_p) tokens where n_p is counted on the full softmax.
- ``stop_commits_next``: host bookkeeping; ``stop_slack`` is how many tokens after a stop
  token ``Request.commit`` keeps when the round committed them (1 under the mutant).
- ``rng_draft_overlaps_coins``: ``draft_round_offset`` is the counter offset of the draft
  stream; 0 under the mutant, so the K draft uniforms of a round are the first K
  uniforms of its accept block, the acceptance coins (the stream layout in
  ``spec_round``: coins u[0:K], corrections u[K:2K], bonus u[2K]).
- ``rng_bonus_overlaps_next_round``: the bonus uniform u[2K] of round r is round r+1's
  coin u[0] (as if blocks were laid out with a stride one uniform short), so a bonus
  drawn low in its CDF makes the next round's first draft likelier to be accepted.

Pure device computations (no host reads), like ``deep_mutants``.
"""

from __future__ import annotations

import torch

from ..sampling import batched_probabilities, philox_origins, philox_uniforms
from .deep_mutants import RowParams

FILTER_ORDER = "filter_order_top_p_first"
STOP_NEXT = "stop_commits_next"
DRAFT_OVERLAP = "rng_draft_overlaps_coins"
BONUS_OVERLAP = "rng_bonus_overlaps_next_round"
NAMES = (FILTER_ORDER, STOP_NEXT, DRAFT_OVERLAP, BONUS_OVERLAP)


def _expand(t: torch.Tensor, n: int) -> torch.Tensor:  # [B] -> [B * n]
    return t[:, None].expand(t.shape[0], n).reshape(-1)


def top_p_first_law(
    logits: torch.Tensor,  # [N, V] float32 target logits
    temperature: torch.Tensor,  # [N] float32
    top_k: torch.Tensor,  # [N] int64
    top_p: torch.Tensor,  # [N] float32
) -> torch.Tensor:  # [N, V] float32
    """The law with the filters swapped: top-p on the full softmax of logits / T, then
    top-k among the survivors, then the softmax over what is left. Greedy rows keep
    their one-hot (both filters see the same argmax)."""
    off_k = torch.zeros_like(top_k)
    off_p = torch.ones_like(top_p)
    # Each filter alone through the engine's own law: its support is that filter's set.
    kept_p = batched_probabilities(logits, temperature, off_k, top_p) > 0
    kept_k = batched_probabilities(logits, temperature, top_k, off_p) > 0
    # top-k among top-p's survivors: top-p keeps a descending prefix, so the k largest
    # of that prefix are its intersection with the row's own top-k set.
    t = torch.where(temperature == 0.0, torch.ones_like(temperature), temperature)
    scaled = logits / t[:, None]
    return torch.softmax(scaled.masked_fill(~(kept_p & kept_k), float("-inf")), dim=-1)


def filter_order_top_p_first(
    p: torch.Tensor,  # [B, K+1, V] float32 the clean target law
    logits: torch.Tensor,  # [B, K+1, V] float32 target logits
    params: RowParams,
    random: torch.Tensor,  # [B] bool
) -> torch.Tensor:  # [B, K+1, V]
    """p of random rows with 0 < top_k and top_p < 1 rebuilt in the swapped order at
    every position (the verifier's law); other rows exactly the clean p."""
    B, K1, V = logits.shape
    wrong = top_p_first_law(
        logits.reshape(B * K1, V),
        _expand(params.temperature, K1),
        _expand(params.top_k, K1),
        _expand(params.top_p, K1),
    ).view(B, K1, V)
    rows = random & (params.top_k > 0) & (params.top_p < 1.0)
    return torch.where(rows[:, None, None], wrong, p)


def bonus_from_next_round(
    u_block: torch.Tensor,  # [B, 2K+1] float64
    seeds: torch.Tensor,  # [B] int64
    rounds_after: torch.Tensor,  # [B] int64 counters after this round's draw: r + 1
    random: torch.Tensor,  # [B] bool
) -> torch.Tensor:  # [B, 2K+1]
    """u[2K] of random rows replaced by u[0] of the block keyed (seed, r + 1): the next
    round's first coin (philox_uniforms(seed, r + 1, 1) is that block's first uniform)."""
    nxt = philox_uniforms(seeds, rounds_after, 1)[:, 0]
    out = u_block.clone()
    out[:, -1] = torch.where(random, nxt, u_block[:, -1])
    return out


def bonus_origin_from_next_round(
    origins: torch.Tensor,  # [B, 2K+1, 7] int64 the block's Philox origins
    seeds: torch.Tensor,  # [B] int64
    rounds_after: torch.Tensor,  # [B] int64
    random: torch.Tensor,  # [B] bool
) -> torch.Tensor:  # [B, 2K+1, 7]
    """Where ``bonus_from_next_round``'s u[2K] comes from: the same call's origin."""
    nxt = philox_origins(seeds, rounds_after, 1)[:, 0]  # [B, 7]
    out = origins.clone()
    out[:, -1] = torch.where(random[:, None], nxt, origins[:, -1])
    return out
