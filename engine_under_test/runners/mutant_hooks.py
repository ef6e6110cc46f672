"""Engine mutants: planted bugs in how a round builds p, q, drafts, uniforms and inputs.

Every mutant is off unless ``LLM(..., mutant=name)`` names it (names and bug classes
live in ``engine_under_test.mutants``). Kernel mutants are not implemented here: their
name is passed to ``speculative_accept(..., mutant=name)``. Engine mutants act on the
random rows of a round only, so greedy rows keep greedy acceptance even when mutated
(the bugs concern random sampling).

With ``mutant=None`` every hook is the identity and costs nothing.
"""
from __future__ import annotations

import torch

from ..mutants import MUTANTS
from ..sampling import KERNEL_MUTANTS, batched_probabilities, categorical


def default_law(logits: torch.Tensor) -> torch.Tensor:
    """Softmax at temperature 1, no top-k/top-p: [N, V] -> [N, V] float32."""
    n = logits.shape[0]
    return batched_probabilities(
        logits, torch.ones(n, dtype=torch.float32, device=logits.device),
        torch.zeros(n, dtype=torch.int64, device=logits.device),
        torch.ones(n, dtype=torch.float32, device=logits.device))


class MutantHooks:
    def __init__(self, name: str | None):
        if name is not None and name not in MUTANTS:
            raise ValueError(f"unknown mutant {name!r}; valid: {', '.join(sorted(MUTANTS))}")
        self.name = name
        self.kernel = name if name in KERNEL_MUTANTS else None

    def is_(self, name: str) -> bool:
        return self.name == name

    @property
    def needs_draft_logits(self) -> bool:
        return self.name == "draft_raw_q"

    @property
    def needs_target_logits(self) -> bool:
        return self.name in ("target_default_params", "bonus_params")

    # ---------------------------------------------------------------- uniforms
    def share(self, u: torch.Tensor,         # [B, n] float64 per-row uniforms
              random: torch.Tensor) -> torch.Tensor:  # [B] bool
        """shared_rng: every random row gets the block of the first random row."""
        if self.name != "shared_rng":
            return u
        first = torch.argmax(random.to(torch.int64))      # device index, no host read
        shared = u.index_select(0, first.view(1)).expand_as(u)
        return torch.where(random[:, None], shared, u)

    # ---------------------------------------------------------------- drafts
    def draft(self, q: torch.Tensor,          # [B, V] float32 draft law at one position
              u: torch.Tensor,                # [B] float64 draft uniforms
              random: torch.Tensor) -> torch.Tensor:  # -> [B] int64
        x = categorical(q, u)
        if self.name == "greedy_draft":  # argmax drafts, yet q stays the softmax
            x = torch.where(random, torch.argmax(q, dim=-1), x)
        return x

    def q_for_accept(self, q: torch.Tensor,          # [B, K, V] float32 law drafts came from
                     drafts: torch.Tensor,           # [B, K] int64
                     draft_logits: torch.Tensor | None,  # [B, K, V] or None
                     random: torch.Tensor) -> torch.Tensor:
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

    def p_for_accept(self, p: torch.Tensor,                 # [B, K+1, V] float32
                     target_logits: torch.Tensor | None,    # [B, K+1, V] or None
                     draft_lens: torch.Tensor,              # [B] int64
                     random: torch.Tensor) -> torch.Tensor:
        name = self.name
        if name not in ("target_default_params", "bonus_params"):
            return p
        B, K1, V = target_logits.shape
        plain = default_law(target_logits.reshape(B * K1, V)).view(B, K1, V)
        r = random[:, None, None]
        if name == "target_default_params":
            return torch.where(r, plain, p)
        # bonus_params: p at the bonus position L = draft_len only (used for nothing else)
        at_bonus = (torch.arange(K1, device=p.device)[None, :] == draft_lens[:, None])
        return torch.where(r & at_bonus[..., None], plain, p)

    # ---------------------------------------------------------------- inputs
    def next_input(self, committed_last: torch.Tensor,  # [B] int64
                   drafts: torch.Tensor,                # [B, K] int64
                   draft_lens: torch.Tensor,            # [B] int64
                   random: torch.Tensor) -> torch.Tensor:  # [B] bool -> [B] int64
        """async_stale_input: feed the last draft instead of the last committed token."""
        if self.name != "async_stale_input":
            return committed_last
        last_draft = drafts.gather(1, (draft_lens - 1).clamp_min(0)[:, None]).squeeze(1)
        return torch.where(random & (draft_lens > 0), last_draft, committed_last)
