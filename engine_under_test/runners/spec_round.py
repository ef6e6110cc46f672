"""One block-speculation round over the slot prefix 0..B-1 (shared by sync and async).

Vocabulary (docs/contracts.md): a **round** drafts K tokens at depth d and verifies the
K+1 positions at full depth R; a draft is **accepted** iff ``u_j * q(x_j) < p(x_j)``;
the **stop point** is the first position that is not a valid accept; there the
**correction** is drawn from max(p - q, 0), or, when all L = draft_len drafts were
accepted, the **bonus** from p at L; the **committed** tokens are the accepted drafts
followed by the correction or bonus. p is the target law, q the draft law.

Self-speculation, nothing recomputed (K below is the round's width W <= K, see
``speculative_round``)::

    draft   j = 0..K-1: input x_j (x_0 = last committed token) at pos + j,
            loops 0..d-1 -> h_d[j] -> q_j = law(lm_head(h_d[j])) -> x_{j+1} ~ q_j
    verify  loops 0..d-1 on x_K (its shallow state), then loops d..R-1 on the K+1
            states h_d[0..K] at pos..pos+K -> p_0..p_K
    accept  speculative_accept(p, q, drafts, draft_lens, uniforms)

Loops 0..d-1 write the shallow KV namespaces at pos..pos+K and loops d..R-1 the deep
ones, each exactly once per position. Positions past the committed tokens hold stale
entries that the next round overwrites before any query can see them (a query at i
only attends to keys <= i, and key i is written in the same forward).

Randomness (contract 2). A random request owns a Philox stream keyed by its seed:

- the accept block, 2K+1 uniforms per submitted round, comes from ``RngRegistry.draw``
  keyed by (seed, round) -- coins u[0:K], corrections u[K:2K], bonus u[2K];
- the K draft-token uniforms come from the same generator in a distinct domain:
  ``philox_uniforms(seed, round + DRAFT_ROUND_OFFSET, K)`` with the round counter read
  on the device just before the draw (the offset sets the counter's high word, so the
  two blocks never overlap and are independent).

Mutant hooks (``MutantHooks``) may rekey the blocks (``rng_key``); by default they are
the request's own.

Greedy rows (and dead rows) draw nothing: their uniforms are zeros and their one-hot
p and q reduce the rule to greedy acceptance. No host reads anywhere in this module.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model import KVCache, LoopedLM
from ..profiling import phase_begin, phase_end
from ..sampling import (
    UNCLASSIFIED,
    RngRegistry,
    batched_probabilities,
    categorical,
    philox_origins,
    philox_uniforms,
    speculative_accept,
)
from .deep_mutants import RowParams
from .mutant_hooks import MutantHooks
from .state import SlotState

# Counter high word 2**30 for draft uniforms; accept blocks use rounds < 2**32.
DRAFT_ROUND_OFFSET = 1 << 62


class RoundOutputs(NamedTuple):
    """Device outputs of one round (B rows)."""

    tokens: torch.Tensor  # [B, K+1] int64 committed tokens, -1 padded
    num_accepted: torch.Tensor  # [B] int64
    num_committed: torch.Tensor  # [B] int64 (0 on error)
    error: torch.Tensor  # [B] bool, invalid law at the stop point
    invalid: torch.Tensor  # [B] int8 why (sampling.INVALID_NAMES)
    draft_lens: torch.Tensor  # [B] int64 L of each row
    drafts: torch.Tensor  # [B, K] int64
    live: torch.Tensor  # [B] bool rows live when the round ran
    failed: torch.Tensor  # [1] bool: an error on a live row fails the round
    pos: torch.Tensor  # [B] int64 position of each row's input token
    input_token: torch.Tensor  # [B] int64 the round's input (last committed token)
    # generate(trace=True) only (runners/law_trace.py), None otherwise:
    trace_p: torch.Tensor | None = None  # [B, W+1, V] float32 the p the kernel received
    trace_q: torch.Tensor | None = None  # [B, W, V] float32 the q the kernel received
    # [B, 3K+1] float64 the round's uniforms (draft j, then coins, corrections, bonus)
    # and [B, 3K+1, 7] int64 their Philox origins (sampling.ORIGIN_COLUMNS; -1: none)
    trace_u: torch.Tensor | None = None
    trace_origins: torch.Tensor | None = None

    def host_view(self) -> dict[str, torch.Tensor]:
        """What the host needs to collect (drafts stay on the device)."""
        return {
            "tokens": self.tokens,
            "num_accepted": self.num_accepted,
            "num_committed": self.num_committed,
            "error": self.error,
            "invalid": self.invalid,
            "draft_lens": self.draft_lens,
            "live": self.live,
            "failed": self.failed,
            "pos": self.pos,
            "input_token": self.input_token,
        }


def draft_uniforms(
    rng: RngRegistry, B: int, K: int, random: torch.Tensor, offset: int = DRAFT_ROUND_OFFSET
) -> torch.Tensor:  # [B] bool -> [B, K] float64
    """The K draft uniforms of rows 0..B-1 for the round about to be drawn (``offset``:
    the draft domain's counter offset; only a planted bug passes another)."""
    u = philox_uniforms(rng.seed[:B], rng.round[:B] + offset, K)
    return torch.where(random[:, None], u, 0.0)


def round_uniforms(
    rng: RngRegistry,
    B: int,
    K: int,
    random: torch.Tensor,
    hooks: MutantHooks,
    trace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The round's draft uniforms [B, K] and accept block [B, 2K+1] (float64), and with
    ``trace`` where each came from: [B, 3K+1, 7] int64 ``philox_origins`` rows (drafts
    0..K-1, then the block), -1 on rows that draw nothing. Advances the random rows'
    counters. The origins are computed from the same (seed, counter) arguments as the
    values at every step below, mutant hooks included, so they name what was drawn."""
    rows = torch.arange(B, device=random.device)
    # Draft-domain uniforms first: they read the round counter that draw() advances.
    offset = hooks.draft_round_offset(DRAFT_ROUND_OFFSET)
    o_draft = o_block = None
    if trace:
        o_draft = hooks.share(philox_origins(rng.seed[:B], rng.round[:B] + offset, K), random)
        o_block = hooks.share(philox_origins(rng.seed[:B], rng.round[:B], 2 * K + 1), random)
    u_draft = hooks.share(draft_uniforms(rng, B, K, random, offset), random)
    u_block = hooks.share(rng.draw(rows, random), random)  # [B, 2K+1]
    key = hooks.rng_key(rng.round[:B], rng.seed[:B])  # None: the request's own key
    if key is not None:  # an RNG-keying mutant
        seeds, rounds = key
        u_draft = philox_uniforms(seeds, rounds + DRAFT_ROUND_OFFSET, K)
        u_block = philox_uniforms(seeds, rounds, u_block.shape[1])
        u_draft, u_block = (torch.where(random[:, None], u, 0.0) for u in (u_draft, u_block))
        if trace:
            o_draft = philox_origins(seeds, rounds + DRAFT_ROUND_OFFSET, K)
            o_block = philox_origins(seeds, rounds, 2 * K + 1)
    u_block = hooks.overlap_bonus(u_block, rng.seed[:B], rng.round[:B], random)
    if not trace:
        return u_draft, u_block, None
    o_block = hooks.overlap_bonus_origin(o_block, rng.seed[:B], rng.round[:B], random)
    origins = torch.cat([o_draft, o_block], dim=1)  # [B, 3K+1, 7]
    return u_draft, u_block, torch.where(random[:, None, None], origins, -1)


@torch.no_grad()
def speculative_round(
    model: LoopedLM,
    cache: KVCache,
    state: SlotState,
    rng: RngRegistry,
    B: int,
    K: int,
    d: int,
    hooks: MutantHooks,
    fault=None,
    width: int | None = None,
    hints: dict | None = None,
    trace: bool = False,
) -> RoundOutputs:
    """Run one round for slots 0..B-1, reading inputs from ``state`` (no host reads).

    width: drafts actually computed, W <= K (default K). The host passes an upper bound
        of every live row's draft length (rows near max_tokens draft fewer), which
        saves work; since each row drafts clamp(budget - 1, 0, W) and every uniform
        keeps its place in the request's 2K+1 block (coins u[j], corrections u[K + j],
        bonus u[2K]), W changes the round's shapes, never its law or its draws.
    fault: test hook ``fault(kind, logits) -> logits``; kind is ("q", j) with [B, V]
        draft logits of step j, or ("p", None) with [B, W+1, V]; None in production.
    hints: host promises for ``batched_probabilities`` (``RunnerBase.sampling_hints``).
    trace: also return the p and q the accept kernel received (``trace_p``/``trace_q``)
        and the round's uniforms with their Philox origins (``trace_u``/``trace_origins``).
    """
    hints = hints or {}
    R = model.num_loops
    W = K if width is None else width
    dev = state.next_token.device
    rows = torch.arange(B, device=dev)
    tok, pos = state.next_token[:B], state.next_pos[:B]
    live = state.live[:B].clone()
    temp, top_k, top_p = state.temperature[:B], state.top_k[:B], state.top_p[:B]
    random = state.random[:B] & live
    draft_lens = (state.budget[:B] - 1).clamp(0, W)

    u_draft, u_block, origins = round_uniforms(rng, B, K, random, hooks, trace)
    u_accept = torch.cat([u_block[:, :W], u_block[:, K : K + W], u_block[:, 2 * K :]], dim=1)

    # ---- draft: W steps at depth d ------------------------------------------------
    phase = phase_begin("draft")
    x = tok
    shallow, qs, draft_logits, drafts = [], [], [], []
    for j in range(W):
        ctx = model.context((pos + j)[:, None], rows, cache.max_len, prefix=True)
        h = model.run_loops(model.embed(x[:, None]), 0, d, cache, ctx)  # [B, 1, D]
        shallow.append(h)
        logits_q = model.exit_logits(h[:, 0], d)  # [B, V] f32
        if fault is not None:
            logits_q = fault(("q", j), logits_q)
        sample = phase_begin("draft.sample")  # a sub-phase: the draft law and its token
        q_j = batched_probabilities(logits_q, temp, top_k, top_p, **hints)
        x = hooks.draft(categorical(q_j, u_draft[:, j]), q_j, random)
        phase_end(sample)
        qs.append(q_j)
        drafts.append(x)
        if hooks.needs_draft_logits:
            draft_logits.append(logits_q)
    V = model.cfg.vocab_size
    drafts_t = torch.stack(drafts, dim=1) if drafts else tok.new_zeros((B, 0))  # [B, W]
    q = torch.stack(qs, dim=1) if qs else torch.zeros(B, 0, V, device=dev)  # [B, W, V]

    # ---- verify: shallow state of x_W, then loops d..R-1 over W+1 positions -------
    phase_end(phase)
    phase = phase_begin("verify")
    ctx = model.context((pos + W)[:, None], rows, cache.max_len, prefix=True)
    shallow.append(model.run_loops(model.embed(x[:, None]), 0, d, cache, ctx))
    h = torch.cat(shallow, dim=1)  # [B, W+1, D]
    offsets = torch.arange(W + 1, device=dev)
    ctx = model.context(pos[:, None] + offsets[None, :], rows, cache.max_len, prefix=True)
    h = model.run_loops(h, d, R, cache, ctx)
    logits_p = hooks.target_logits(model.logits(h), random)  # [B, W+1, V]
    if fault is not None:
        logits_p = fault(("p", None), logits_p)
    per_position = lambda t: t[:, None].expand(B, W + 1).reshape(-1)  # noqa: E731
    laws = phase_begin("verify.probabilities")
    p = batched_probabilities(
        logits_p.reshape(B * (W + 1), V),
        per_position(temp),
        per_position(top_k),
        per_position(top_p),
        **hints,
    ).view(B, W + 1, V)
    phase_end(laws)

    phase_end(phase)
    phase = phase_begin("accept")
    q = hooks.q_for_accept(
        q, drafts_t, torch.stack(draft_logits, 1) if draft_logits else None, random
    )
    p = hooks.p_for_accept(
        p,
        logits_p if hooks.needs_target_logits else None,
        draft_lens,
        random,
        RowParams(temp, top_k, top_p, live),
    )
    res = speculative_accept(p, q, drafts_t, draft_lens, u_accept, mutant=hooks.kernel)
    res = hooks.after_accept(res, (p, q, drafts_t, draft_lens, u_accept), rng.round[:B], random)
    failed = (res.error & live).any().view(1)
    # Host format is static: [B, K+1] tokens and [B, K] drafts, -1 padded past W.
    tokens = torch.nn.functional.pad(res.tokens, (0, K - W), value=-1)
    drafts_t = torch.nn.functional.pad(drafts_t, (0, K - W), value=-1)
    phase_end(phase)
    invalid = res.invalid
    if invalid is None:  # an accept implementation that does not classify its errors
        invalid = torch.where(res.error, UNCLASSIFIED, 0).to(torch.int8)
    return RoundOutputs(
        tokens,
        res.num_accepted,
        res.num_committed,
        res.error,
        invalid,
        draft_lens,
        drafts_t,
        live,
        failed,
        pos.clone(),
        tok.clone(),
        p if trace else None,
        q if trace else None,
        torch.cat([u_draft, u_block], dim=1) if trace else None,
        origins,
    )
