"""Engine mutants: planted bugs in how a round builds p, q, drafts, uniforms and inputs.

Every mutant is off unless ``LLM(..., mutant=name)`` names it (names and bug classes
live in ``engine_under_test.mutants``). Kernel mutants are not implemented here: their
name is passed to ``speculative_accept(..., mutant=name)``. Engine mutants act on the
random rows of a round only, so greedy rows keep greedy acceptance even when mutated
(the bugs concern random sampling) -- except ``greedy_row_sampled``, whose bug is the
greedy rows of a mixed batch.

Every hook wraps a call site of the clean code: it receives what the clean code made
(a draft token, q, p, the target logits, the uniforms, the next input) and returns it,
changed only for its own mutant. With ``mutant=None`` every hook is the identity and
costs nothing. Two host hooks (``host_inputs``, ``after_prefill`` /
``after_round_submitted``) write device state the way the runner's own uploads do
(stream-ordered copies, no reads), for the mutants whose bug lives in scheduling.

``nan_target_once`` is a fault, not a bias: it keeps one device flag (``fired``, part of
the state a CUDA Graph capture restores) so that it fires in the engine's first decode
round only, on the device, without a host read.
"""

from __future__ import annotations

import torch

from ..mutants import MUTANTS
from ..sampling import KERNEL_MUTANTS, AcceptResult, batched_probabilities, speculative_accept
from . import deep_mutants as deep
from . import scope_mutants as scope
from .deep_mutants import RowParams, StaleParams

# p_for_accept mutants that rebuild p from the target logits.
_FROM_TARGET_LOGITS = (
    "target_default_params",
    "bonus_params",
    "deep_position_temp",
    "filter_order_temp",
    "greedy_row_sampled",
    scope.FILTER_ORDER,
)


def default_law(logits: torch.Tensor) -> torch.Tensor:
    """Softmax at temperature 1, no top-k/top-p: [N, V] -> [N, V] float32."""
    n = logits.shape[0]
    return batched_probabilities(
        logits,
        torch.ones(n, dtype=torch.float32, device=logits.device),
        torch.zeros(n, dtype=torch.int64, device=logits.device),
        torch.ones(n, dtype=torch.float32, device=logits.device),
    )


class MutantHooks:
    def __init__(self, name: str | None, device: torch.device | str = "cpu"):
        if name is not None and name not in MUTANTS:
            raise ValueError(f"unknown mutant {name!r}; valid: {', '.join(sorted(MUTANTS))}")
        if name is not None and MUTANTS[name].layer not in ("kernel", "engine"):
            # tree mutants live in specconform's reference tree sampler: the engine has no
            # tree verification, so selecting one here would plant nothing.
            raise ValueError(f"mutant {name!r} is a {MUTANTS[name].layer} mutant, not the engine's")
        self.name = name
        self.kernel = name if name in KERNEL_MUTANTS else None
        # nan_target_once: has the fault fired? [1] bool on the engine's device.
        self.fired = torch.zeros(1, dtype=torch.bool, device=device)
        self.stale = StaleParams() if name == "slot_stale_params" else None

    def device_state(self) -> list[torch.Tensor]:
        """Device tensors the hooks mutate (a graph capture's warm-up restores them)."""
        return [self.fired] if self.name == "nan_target_once" else []

    @property
    def needs_draft_logits(self) -> bool:
        return self.name == "draft_raw_q"

    @property
    def needs_target_logits(self) -> bool:
        return self.name in _FROM_TARGET_LOGITS

    @property
    def stop_slack(self) -> int:
        """Tokens after a stop token that ``Request.commit`` keeps (stop_commits_next: 1)."""
        return 1 if self.name == scope.STOP_NEXT else 0

    def overlap_bonus(
        self,
        u_block: torch.Tensor,  # [B, 2K+1] float64 the round's accept block
        seeds: torch.Tensor,  # [B] int64
        rounds_after: torch.Tensor,  # [B] int64 the rows' RNG counters after the draw
        random: torch.Tensor,  # [B] bool
    ) -> torch.Tensor:
        """rng_bonus_overlaps_next_round: the bonus uniform u[2K] is the next round's
        coin u[0]; otherwise ``u_block`` itself."""
        if self.name != scope.BONUS_OVERLAP:
            return u_block
        return scope.bonus_from_next_round(u_block, seeds, rounds_after, random)

    def overlap_bonus_origin(
        self,
        origins: torch.Tensor,  # [B, 2K+1, 7] int64 the accept block's Philox origins
        seeds: torch.Tensor,  # [B] int64
        rounds_after: torch.Tensor,  # [B] int64
        random: torch.Tensor,  # [B] bool
    ) -> torch.Tensor:
        """The origins of ``overlap_bonus``'s block (traced rounds only)."""
        if self.name != scope.BONUS_OVERLAP:
            return origins
        return scope.bonus_origin_from_next_round(origins, seeds, rounds_after, random)

    def draft_round_offset(self, offset: int) -> int:
        """The draft stream's counter offset: ``offset`` (spec_round.DRAFT_ROUND_OFFSET),
        or 0 under rng_draft_overlaps_coins (draft j then reads acceptance coin j)."""
        return 0 if self.name == scope.DRAFT_OVERLAP else offset

    @property
    def allows_sampling_hints(self) -> bool:
        """False where the device parameters are not the host's (stale slot params), so
        host promises about them (``RunnerBase.sampling_hints``) would not hold."""
        return self.stale is None

    # ---------------------------------------------------------------- uniforms
    def share(
        self,
        u: torch.Tensor,  # [B, n] float64 per-row uniforms
        random: torch.Tensor,
    ) -> torch.Tensor:  # [B] bool
        """shared_rng: every random row gets the block of the first random row."""
        if self.name != "shared_rng":
            return u
        first = torch.argmax(random.to(torch.int64))  # device index, no host read
        shared = u.index_select(0, first.view(1)).expand_as(u)
        # [B, n] uniforms, or [B, n, 7] their origins (traced rounds)
        return torch.where(random.view(-1, *[1] * (u.dim() - 1)), shared, u)

    def rng_key(
        self,
        rng_round: torch.Tensor,  # [B] int64 the rows' RNG counters after this round's draw
        seed: torch.Tensor,  # [B] int64 the rows' seeds
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(seeds, rounds) [B] that the round's uniforms are keyed by instead of the
        request's (seed, round); None (the default): the request's own key.

        rng_reused_rounds: every decode round gets the first decode round's block (RNG
        round 1). rng_shared_requests: from the second decode round on, keyed by the
        round alone (seed 0), so requests at the same round share their block."""
        if self.name == "rng_reused_rounds":
            return seed, torch.ones_like(rng_round)
        if self.name == "rng_shared_requests":
            shared = deep.decode_round(rng_round) >= 1
            return torch.where(shared, 0, seed), rng_round - 1
        return None

    # ---------------------------------------------------------------- drafts
    def draft(
        self,
        x: torch.Tensor,  # [B] int64 the clean draft, drawn from q
        q: torch.Tensor,  # [B, V] float32 draft law at one position
        random: torch.Tensor,
    ) -> torch.Tensor:  # -> [B] int64
        if self.name == "greedy_draft":  # argmax drafts, yet q stays the softmax
            return torch.where(random, torch.argmax(q, dim=-1), x)
        return x

    # ---------------------------------------------------------------- target logits
    def target_logits(
        self,
        logits: torch.Tensor,  # [B, K+1, V] float32 verification
        random: torch.Tensor,
    ) -> torch.Tensor:  # [B] bool -> same shape
        """nan_target_once: the first random row's target logits at position 0 become
        NaN (the whole [V] row: a single NaN logit would be filtered out by top-k, whose
        threshold it fails), in the first decode round that has a random row; later
        rounds untouched. Position 0 is read by every round (the stop point is >= 0),
        so the row's law at its stop point is invalid and the round fails."""
        if self.name != "nan_target_once":
            return logits
        first = torch.argmax(random.to(torch.int64))  # device index, no host read
        hit = (torch.arange(logits.shape[0], device=logits.device) == first) & random
        hit = hit & ~self.fired  # [B] bool, at most one row
        self.fired |= hit.any().view(1)
        poisoned = logits.clone()
        poisoned[:, 0] = float("nan")
        return torch.where(hit[:, None, None], poisoned, logits)

    def q_for_accept(
        self,
        q: torch.Tensor,  # [B, K, V] float32 law drafts came from
        drafts: torch.Tensor,  # [B, K] int64
        draft_logits: torch.Tensor | None,  # [B, K, V] or None
        random: torch.Tensor,
    ) -> torch.Tensor:
        """The q handed to the verifier (the law the drafts came from, unless mutated)."""
        name = self.name
        if q.shape[1] == 0:  # an effective-K=0 round: no drafts, q unused
            return q
        r = random[:, None, None]
        if name == "draft_raw_q":
            B, K, V = draft_logits.shape
            raw = default_law(draft_logits.reshape(B * K, V)).view(B, K, V)
            return torch.where(r, raw, q)
        if name == "residual_inplace":
            # An in-place "gather" of q(x_j) by masking: the accept coin still sees
            # q(x_j), but the residual max(p - q, 0) now only subtracts q at x_j.
            onehot = torch.zeros_like(q).scatter_(-1, drafts[..., None], 1.0)
            q.mul_(torch.where(r, onehot, torch.ones_like(q)))
            return q
        if name == "no_draft_probs":
            onehot = torch.zeros_like(q).scatter_(-1, drafts[..., None], 1.0)
            return torch.where(r, onehot, q)
        if name == "bf16_q":
            return torch.where(r, q.to(torch.bfloat16).to(torch.float32), q)
        return q

    def p_for_accept(
        self,
        p: torch.Tensor,  # [B, K+1, V] float32
        target_logits: torch.Tensor | None,  # [B, K+1, V] or None
        draft_lens: torch.Tensor,  # [B] int64
        random: torch.Tensor,  # [B] bool
        params: RowParams,
    ) -> torch.Tensor:
        name = self.name
        if name == "deep_position_temp":
            return deep.deep_position_temp(p, target_logits, params, random)
        if name == scope.FILTER_ORDER:
            return scope.filter_order_top_p_first(p, target_logits, params, random)
        if name == "filter_order_temp":
            return deep.filter_order_temp(p, target_logits, params, random)
        if name == "top_p_drop_crossing":
            return deep.top_p_drop_crossing(p, params, random)
        if name == "bonus_after_accepts":
            return deep.bonus_after_accepts(p, draft_lens, random)
        if name == "greedy_row_sampled":
            return deep.greedy_row_sampled(p, target_logits, draft_lens, params, random)
        if name not in ("target_default_params", "bonus_params"):
            return p
        B, K1, V = target_logits.shape
        plain = default_law(target_logits.reshape(B * K1, V)).view(B, K1, V)
        r = random[:, None, None]
        if name == "target_default_params":
            return torch.where(r, plain, p)
        # bonus_params: p at the bonus position L = draft_len only (used for nothing else)
        at_bonus = torch.arange(K1, device=p.device)[None, :] == draft_lens[:, None]
        return torch.where(r & at_bonus[..., None], plain, p)

    def after_accept(
        self,
        res: AcceptResult,  # the kernel's result for the round
        accept_args: tuple,  # (p, q, drafts, draft_lens, uniforms) it was called with
        rng_round: torch.Tensor,  # [B] int64 RNG counters after this round's draw
        random: torch.Tensor,  # [B] bool
    ) -> AcceptResult:
        """late_round_residual: from the third decode round on, a random row's result is
        the one whose correction comes from p instead of max(p - q, 0) (the same
        uniforms, so accept decisions and bonuses are the clean ones)."""
        if self.name != "late_round_residual":
            return res
        late = random & (deep.decode_round(rng_round) >= 2)
        bad = speculative_accept(*accept_args, mutant="residual_from_p")
        pick = lambda a, b: torch.where(late.view(-1, *[1] * (a.dim() - 1)), b, a)  # noqa: E731
        return AcceptResult(*(pick(a, b) for a, b in zip(res, bad, strict=True)))

    # ---------------------------------------------------------------- inputs
    def next_input(
        self,
        committed_last: torch.Tensor,  # [B] int64
        drafts: torch.Tensor,  # [B, K] int64
        draft_lens: torch.Tensor,  # [B] int64
        num_accepted: torch.Tensor,  # [B] int64
        random: torch.Tensor,
    ) -> torch.Tensor:  # [B] bool -> [B] int64
        """async_stale_input: feed the last draft instead of the last committed token.
        next_input_partial: after a partial accept, the last accepted draft."""
        if self.name == "next_input_partial":
            return deep.next_input_partial(committed_last, drafts, draft_lens, num_accepted, random)
        if self.name != "async_stale_input":
            return committed_last
        last_draft = drafts.gather(1, (draft_lens - 1).clamp_min(0)[:, None]).squeeze(1)
        return torch.where(random & (draft_lens > 0), last_draft, committed_last)

    def host_inputs(self, state, B: int, rows: list) -> None:
        """Sync runners, after the host uploaded rows 0..B-1's inputs: next_input_partial
        re-uploads the last accepted draft as the input of random rows whose last round
        was a partial accept (the host records keep the right tokens)."""
        if self.name != "next_input_partial":
            return
        fix = [
            (b, r.output.token_ids[-2])
            for b, r in enumerate(rows[:B])
            if r is not None
            and not r.finished
            and r.seed is not None
            and r.output.rounds
            and 0 < r.output.rounds[-1].accepted < r.output.rounds[-1].drafted
        ]
        if fix:
            idx = state.upload([b for b, _ in fix], torch.int64)
            state.next_token.index_copy_(0, idx, state.upload([t for _, t in fix], torch.int64))

    # ---------------------------------------------------------------- slot parameters
    def after_prefill(self, state, admitted: list) -> None:
        """slot_stale_params: reused slots get their previous occupant's parameters."""
        if self.stale is not None:
            self.stale.after_prefill(state, admitted)

    def after_round_submitted(self, state) -> None:
        """slot_stale_params: the right parameters come back after one decode round."""
        if self.stale is not None:
            self.stale.restore(state)
