"""Ragged speculative rejection sampling: one round's accept / correct / bonus step.

p is always the target law (full depth R) and q the draft law (depth d). For each row:

* draft j is accepted iff j < draft_len, 0 <= drafts[j] < V and
  u[j] * q_j(x_j) < p_j(x_j), computed in float64. The strict < rejects a token with
  p_j(x_j) == 0 even when u[j] == 0 (a `coin <= ratio` test would accept it).
* the stop point s is the first position that is not a valid accept (0 <= s <= L,
  L = draft_len);
* s < L (rejection): the correction token is drawn from max(p_s - q_s, 0) with u[K + s];
* s == L (every draft accepted; L == 0 is "effective K = 0"): the bonus token is drawn
  from p_L with u[2K]. The bonus position is the stop point, draft_len, not K.
* the law used at the stop point is invalid when it has a non-finite entry or no
  positive mass (a zero residual included): the row's error flag is set, `invalid`
  says which of the three it was, and the row commits nothing. Positions after the
  stop point are never looked at for the result, so NaNs there change nothing.

`sample_target(p, u)` is the same step with no drafts (K = 0, "effective K = 0"): one
draw from the target law p with the same error rule. Prefill (t1) and plain decoding
draw from the target through it, so every target draw of the engine -- bonus,
correction, t1, nospec -- is made, and judged valid or not, by this one function.

Uniform layout per row: u[0:K] accept coins, u[K + j] the correction draw for a stop
at j, u[2K] the bonus draw. A greedy row passes zeros with one-hot p and q: draft j is
accepted iff it is the target argmax, and the correction and bonus are the target
argmax (the residual of two one-hots is the target's one-hot), i.e. greedy acceptance.

Kernel mutants (specconform's planted bugs, selected only by the explicit `mutant=`
argument; the registry with their bug classes is engine_under_test.mutants):
`residual_from_p`, `bonus_off_by_one`, `shared_uniform`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from engine_under_test.sampling._checks import (
    require_integer,
    require_law,
    require_ndim,
    require_same_device,
    require_shape,
    require_tensors,
)
from engine_under_test.sampling._dispatch import sampling_kernel_for
from engine_under_test.sampling.categorical import _draw, _last_positive

KERNEL_MUTANTS = ("residual_from_p", "bonus_off_by_one", "shared_uniform")

# AcceptResult.invalid codes: what made the law at a row's stop point invalid.
# UNCLASSIFIED: an error flag from an accept implementation that gives no reason.
VALID, NON_FINITE, ZERO_MASS, ZERO_RESIDUAL, UNCLASSIFIED = 0, 1, 2, 3, -1
INVALID_NAMES = {
    NON_FINITE: "non_finite",
    ZERO_MASS: "zero_mass",
    ZERO_RESIDUAL: "zero_residual",
    UNCLASSIFIED: "unclassified",
}


class AcceptResult(NamedTuple):
    """What one round commits for each row."""

    tokens: torch.Tensor  # [B, K+1] int64 committed tokens, -1 padded (all -1 on error)
    num_accepted: torch.Tensor  # [B] int64 accepted drafts (0 on error)
    num_committed: torch.Tensor  # [B] int64 == num_accepted + 1 (0 on error)
    error: torch.Tensor  # [B] bool, invalid law at the stop point
    # [B] int8 why (VALID, NON_FINITE, ZERO_MASS, ZERO_RESIDUAL; error == invalid != 0).
    # None only from an accept implementation that does not classify (callers then
    # report UNCLASSIFIED: the flag, not the reason).
    invalid: torch.Tensor | None = None


def _check(p, q, drafts, draft_lens, uniforms, mutant) -> None:
    require_tensors(p=p, q=q, drafts=drafts, draft_lens=draft_lens, uniforms=uniforms)
    require_ndim("drafts", drafts, 2, "[B, K]")
    require_integer("drafts", drafts)
    B, K = drafts.shape
    V = require_law("p", p, 3, "[B, K+1, V]")[2]
    require_shape("p", p, (B, K + 1, V), "[B, K+1, V]")
    require_shape("q", q, (B, K, V), "[B, K, V]", "float")
    require_shape("draft_lens", draft_lens, (B,), "[B]", "integer")
    require_shape("uniforms", uniforms, (B, 2 * K + 1), "[B, 2K+1]", "float")
    require_same_device("p", p, q=q, drafts=drafts, draft_lens=draft_lens, uniforms=uniforms)
    if mutant is not None and mutant not in KERNEL_MUTANTS:
        raise ValueError(
            f"unknown kernel mutant {mutant!r}; valid: None or one of {', '.join(KERNEL_MUTANTS)}"
        )


def speculative_accept(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    draft_lens: torch.Tensor,
    uniforms: torch.Tensor,
    mutant: str | None = None,
) -> AcceptResult:
    """Accept, correct or extend each row's drafts (rule in the module docstring).

    p,           # [B, K+1, V] float32 target law per position
    q,           # [B, K, V] float32 draft law per position
    drafts,      # [B, K] int64 draft token ids
    draft_lens,  # [B] int64 in [0, K] (values outside are clamped to [0, K])
    uniforms,    # [B, 2K+1] float64: coins u[0:K], corrections u[K:2K], bonus u[2K]
    mutant,      # None (correct) or a kernel mutant name; tests and protocols only
    returns      AcceptResult (see its fields)

    Fully vectorised, no host reads, inputs never modified.
    """
    _check(p, q, drafts, draft_lens, uniforms, mutant)
    kernel = sampling_kernel_for("speculative_accept", p, q)  # Triton on CUDA (_dispatch)
    if kernel is not None and mutant is None:
        tokens, num_accepted, num_committed, error = kernel(p, q, drafts, draft_lens, uniforms)
        # The Triton kernel flags an invalid stop-point law without saying why: the
        # reason is UNCLASSIFIED there (the torch path names it), never missing.
        invalid = torch.where(error, UNCLASSIFIED, VALID).to(torch.int8)
        return AcceptResult(tokens, num_accepted, num_committed, error, invalid)
    B, K = drafts.shape
    V = p.shape[2]
    device = p.device
    u = uniforms.double()
    lens = draft_lens.to(torch.int64).clamp(0, K)
    positions = torch.arange(K, device=device)

    # --- accept test at every draft position, float64 ---------------------------------
    in_range = (drafts >= 0) & (drafts < V)
    safe_drafts = drafts.to(torch.int64).clamp(0, V - 1)[..., None]  # [B, K, 1]
    p_draft = p[:, :K].gather(-1, safe_drafts).squeeze(-1).double()  # [B, K]
    q_draft = q.gather(-1, safe_drafts).squeeze(-1).double()  # [B, K]
    # NaN in p or q makes the comparison False: a rejection, and then the stop-point
    # law below holds the NaN and sets the error flag.
    accepted = (positions < lens[:, None]) & in_range & (u[:, :K] * q_draft < p_draft)

    # The stop point is the number of leading accepts (a cumulative product stops
    # counting at the first non-accept, whatever comes after it).
    stop = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)  # [B] in [0, lens]
    rejected = stop < lens  # [B] bool

    # --- the law at the stop point ----------------------------------------------------
    # Only the stop point's rows of p and q are copied ([B, V] float32 each); float64
    # appears once, for the law itself, which then becomes its cdf in place.
    law_position = stop
    if mutant == "bonus_off_by_one":
        # Bug: bonus from p at draft_len - 1 ("position K instead of K+1").
        law_position = torch.where(rejected, stop, (stop - 1).clamp_min(0))
    rows = torch.arange(B, device=device)
    law = p[rows, law_position].to(torch.float64)  # [B, V], exact widening
    q_finite = None
    if K > 0:
        q_stop = q[rows, stop.clamp(max=K - 1)]  # bonus rows (stop == L) do not use q
        if mutant == "residual_from_p":
            # Bug: the correction is drawn from p instead of (p - q)+ (q still checked).
            q_finite = torch.isfinite(q_stop.sum(dim=-1, dtype=torch.float64))
        else:
            # Rejected rows: the residual p - q in float64 (q is widened exactly inside
            # the subtraction); the other rows keep p (their q is not read: a NaN there
            # stays out).
            law.sub_(torch.where(rejected[:, None], q_stop, 0.0))
    # K == 0 rejects nothing. A row is finite iff its float64 sum is: the entries are
    # float32 values or differences of two, far from float64 overflow, and any inf or
    # NaN makes the sum inf or NaN. For rejected rows that checks p and q both (q = +inf
    # would hide as a 0 after the clamp).
    finite = torch.isfinite(law.sum(dim=-1))
    if q_finite is not None:
        finite = finite & (~rejected | q_finite)
    # Every use of the law clamps it at 0 (NaN stays NaN), so clamp once, in place.
    law.clamp_min_(0.0)
    mass = torch.where(finite, law.sum(dim=-1), 0.0)
    error = ~(finite & (mass > 0))  # non-finite, or no positive mass (zero residual)
    no_mass = torch.where(rejected, ZERO_RESIDUAL, ZERO_MASS)
    invalid = torch.where(finite, torch.where(mass > 0, VALID, no_mass), NON_FINITE).to(torch.int8)

    # --- the correction or bonus draw -------------------------------------------------
    draw_index = torch.where(rejected, K + stop, 2 * K)
    if mutant == "shared_uniform":
        # Bug: the correction reuses the accept coin that just rejected.
        draw_index = torch.where(rejected, stop, 2 * K)
    draw_u = u.gather(1, draw_index[:, None]).squeeze(1)
    # Error rows draw from whatever their law holds (the draw stays an index in [0, V)
    # even on NaN); their token is replaced by -1 below, so it never matters.
    token = _draw(law, draw_u, _last_positive(law))

    # --- committed tokens: accepted drafts, then the correction or bonus --------------
    slots = torch.arange(K + 1, device=device)
    padded = torch.cat(
        [drafts.to(torch.int64), drafts.new_full((B, 1), -1, dtype=torch.int64)], dim=1
    )
    tokens = torch.where(
        slots < stop[:, None], padded, torch.where(slots == stop[:, None], token[:, None], -1)
    )
    tokens = torch.where(error[:, None], -1, tokens)
    num_accepted = torch.where(error, 0, stop)
    num_committed = torch.where(error, 0, stop + 1)
    return AcceptResult(tokens, num_accepted, num_committed, error, invalid)


def sample_target(p: torch.Tensor, u: torch.Tensor) -> AcceptResult:
    """One draw from the target law per row: `speculative_accept` with no drafts.

    p,        # [B, V] float32 target law (rows of weights)
    u,        # [B] float64 in [0, 1): the draw's uniform (u[2K] of a K = 0 block)
    returns   AcceptResult with K = 0: tokens [B, 1] (-1 on error), num_accepted [B]
              zeros, num_committed [B] 1 (0 on error), error [B] bool (non-finite or
              zero mass), invalid [B] int8

    Equals `categorical(p, u)` on every valid row (the same inverse-CDF draw on the
    float64 law). No host reads.
    """
    require_tensors(p=p, u=u)
    require_ndim("p", p, 2, "[B, V]")
    require_ndim("u", u, 1, "[B]")
    B, V = p.shape
    no_drafts = torch.empty((B, 0), dtype=torch.int64, device=p.device)
    return speculative_accept(
        p[:, None],
        p.new_empty((B, 0, V)),
        no_drafts,
        torch.zeros(B, dtype=torch.int64, device=p.device),
        u[:, None],
    )
