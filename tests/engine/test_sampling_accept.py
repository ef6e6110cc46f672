"""speculative_accept: stop points, corrections, bonus, errors and the kernel mutants.

Cases are built by hand on a tiny vocabulary (V = 4) with explicit p, q, drafts and
uniforms, so every expected token can be checked with pencil and paper.
Uniform layout: u[0:K] coins, u[K + j] the correction at a stop at j, u[2K] bonus.
"""

from __future__ import annotations

import pytest
import torch

from engine_under_test.sampling import INVALID_NAMES, KERNEL_MUTANTS, speculative_accept
from tests.engine.helpers import forbid_host_reads

NAN = float("nan")
V = 4
K = 3


def one_hot(i, v=V):
    return [1.0 if j == i else 0.0 for j in range(v)]


def accept(p, q, drafts, draft_lens, uniforms, mutant=None):
    """speculative_accept on Python lists (float32 laws, float64 uniforms)."""
    return speculative_accept(
        torch.tensor(p, dtype=torch.float32),
        torch.tensor(q, dtype=torch.float32),
        torch.tensor(drafts, dtype=torch.int64),
        torch.tensor(draft_lens, dtype=torch.int64),
        torch.tensor(uniforms, dtype=torch.float64),
        mutant=mutant,
    )


def run(p, q, drafts, draft_lens, uniforms, mutant=None):
    """speculative_accept on Python lists; returns the result as lists."""
    out = accept(p, q, drafts, draft_lens, uniforms, mutant)
    return (
        out.tokens.tolist(),
        out.num_accepted.tolist(),
        out.num_committed.tolist(),
        out.error.tolist(),
    )


def invalid_names(p, q, drafts, draft_lens, uniforms):
    """What was invalid at each row's stop point (None: valid)."""
    out = accept(p, q, drafts, draft_lens, uniforms)
    assert torch.equal(out.error, out.invalid != 0)
    return [INVALID_NAMES.get(c) for c in out.invalid.tolist()]


# Position laws used across cases.
P_SURE = one_hot(0)  # p = q = one-hot at token 0: the draft 0 is accepted
P_REJ = [0.1, 0.3, 0.6, 0.0]  # target at a rejecting position
Q_REJ = [0.7, 0.1, 0.2, 0.0]  # draft there; draft token 0: accept iff u * 0.7 < 0.1
# residual (p - q)+ = [0, 0.2, 0.4, 0] -> token 1 for u < 1/3, token 2 for u >= 1/3
P_BONUS = [0.0, 0.25, 0.0, 0.75]  # bonus law: token 1 for u < 0.25, token 3 after


def u_row(coins, corrections, bonus):
    return list(coins) + list(corrections) + [bonus]


def test_all_accepted_draws_the_bonus_from_p_at_draft_len():
    p = [[P_SURE, P_SURE, P_SURE, P_BONUS]]
    q = [[P_SURE, P_SURE, P_SURE]]
    for bonus_u, bonus in ((0.1, 1), (0.25, 3), (0.9, 3)):
        got = run(p, q, [[0, 0, 0]], [3], [u_row([0.99] * 3, [0.0] * 3, bonus_u)])
        assert got == ([[0, 0, 0, bonus]], [3], [4], [False])


@pytest.mark.parametrize("stop", [0, 1, 2])
def test_rejection_at_each_position_draws_the_correction_from_the_residual(stop):
    p = [P_SURE] * K + [P_BONUS]
    q = [P_SURE] * K
    p[stop], q[stop] = P_REJ, Q_REJ
    coins = [0.5] * K  # 0.5 * 0.7 >= 0.1: rejected; elsewhere 0.5 * 1 < 1: accepted
    for corr_u, token in ((0.0, 1), (0.2, 1), (0.34, 2), (0.99, 2)):
        corrections = [0.9] * K
        corrections[stop] = corr_u  # only u[K + stop] may matter
        got = run([p], [q], [[0, 0, 0]], [3], [u_row(coins, corrections, 0.5)])
        tokens = [0] * stop + [token] + [-1] * (K - stop)
        assert got == ([tokens], [stop], [stop + 1], [False])


def test_the_accept_coin_decides_by_strict_inequality():
    # accept iff u * q < p: with p(x) = 0.25, q(x) = 0.5 (exact), u = 0.5 is rejected and
    # the float64 just below it is accepted.
    p = [[[0.25, 0.75, 0.0, 0.0], P_SURE, P_SURE, P_BONUS]]
    q = [[[0.5, 0.0, 0.5, 0.0], P_SURE, P_SURE]]
    below = run(p, q, [[0, 0, 0]], [1], [u_row([0.5 - 2.0**-54, 0, 0], [0] * 3, 0.9)])
    assert below == ([[0, 0, -1, -1]], [1], [2], [False])  # bonus from p[1]: token 0
    at = run(p, q, [[0, 0, 0]], [1], [u_row([0.5, 0, 0], [0] * 3, 0.9)])
    assert at == ([[1, -1, -1, -1]], [0], [1], [False])  # residual: one-hot at token 1


def test_draft_len_zero_samples_from_p_at_position_zero():
    p = [[P_BONUS, P_SURE, P_SURE, P_SURE]]
    q = [[P_SURE, P_SURE, P_SURE]]
    for bonus_u, token in ((0.1, 1), (0.5, 3)):
        got = run(p, q, [[0, 0, 0]], [0], [u_row([0.0] * 3, [0.0] * 3, bonus_u)])
        assert got == ([[token, -1, -1, -1]], [0], [1], [False])


def test_k_zero_samples_from_p_with_the_single_uniform():
    p = torch.tensor([[P_BONUS], [one_hot(2)]], dtype=torch.float32)
    out = speculative_accept(
        p,
        torch.zeros(2, 0, V),
        torch.zeros(2, 0, dtype=torch.int64),
        torch.zeros(2, dtype=torch.int64),
        torch.tensor([[0.1], [0.7]], dtype=torch.float64),
    )
    assert out.tokens.tolist() == [[1], [2]]
    assert out.num_accepted.tolist() == [0, 0] and out.num_committed.tolist() == [1, 1]


def test_ragged_draft_lens():
    # Every draft would be accepted (p = q = one-hot at the draft); the row's draft_len
    # alone decides where the bonus goes, and positions past it are never committed.
    lens = [3, 1, 0, 2]
    p, q, us = [], [], []
    for i, n in enumerate(lens):
        p.append([P_SURE] * n + [one_hot(3 - i % 2)] + [P_SURE] * (K - n))
        q.append([P_SURE] * K)
        us.append(u_row([0.5] * K, [0.5] * K, 0.5))
    tokens, accepted, committed, error = run(p, q, [[0, 0, 0]] * 4, lens, us)
    assert accepted == lens and committed == [n + 1 for n in lens] and error == [False] * 4
    assert tokens == [[0, 0, 0, 3], [0, 2, -1, -1], [3, -1, -1, -1], [0, 0, 2, -1]]


def test_zero_p_draft_is_rejected_even_at_u_zero():
    # p(x) = 0 < q(x): 0 * q < 0 is False. A `coin <= ratio` test would accept x.
    p = [[[0.0, 0.5, 0.5, 0.0], P_SURE, P_SURE, P_BONUS]]
    q = [[[1.0, 0.0, 0.0, 0.0], P_SURE, P_SURE]]
    got = run(p, q, [[0, 0, 0]], [3], [u_row([0.0] * 3, [0.75, 0, 0], 0.0)])
    assert got == ([[2, -1, -1, -1]], [0], [1], [False])


def test_nan_after_the_stop_point_is_ignored():
    p_clean = [P_SURE, P_REJ, P_SURE, P_BONUS]
    q_clean = [P_SURE, Q_REJ, P_SURE]
    p_nan = [P_SURE, P_REJ, [NAN] * V, [NAN] * V]
    q_nan = [P_SURE, Q_REJ, [NAN] * V]
    us = [u_row([0.5, 0.5, 0.0], [0.0, 0.5, 0.0], 0.3)]
    clean = run([p_clean], [q_clean], [[0, 0, 0]], [3], us)
    assert clean == ([[0, 2, -1, -1]], [1], [2], [False])
    assert run([p_nan], [q_nan], [[0, 0, 0]], [3], us) == clean
    # Past the draft length too: a bonus at 1 ignores NaN in p[2], p[3] and q[1:].
    bonus = run(
        [[P_SURE, P_BONUS, [NAN] * V, [NAN] * V]],
        [[P_SURE, [NAN] * V, [NAN] * V]],
        [[0, 0, 0]],
        [1],
        [u_row([0.5] * 3, [0] * 3, 0.6)],
    )
    assert bonus == ([[0, 3, -1, -1]], [1], [2], [False])


@pytest.mark.parametrize(
    "p_stop, q_stop, why, kind",
    [
        ([NAN, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0], "NaN in p at the stop point", "non_finite"),
        ([0.0, 0.5, 0.5, 0.0], [1.0, NAN, 0.0, 0.0], "NaN in q at the stop point", "non_finite"),
        (
            [0.0, 0.5, 0.5, 0.0],
            [1.0, 0.0, float("inf"), 0.0],
            "inf in q hidden by the clamp",
            "non_finite",
        ),
        (
            [0.0, 0.5, 0.5, 0.0],
            [0.0, 0.5, 0.5, 0.0],
            "zero residual (p == q, p(x) = 0)",
            "zero_residual",
        ),
    ],
)
def test_invalid_law_at_a_rejecting_stop_point_sets_error(p_stop, q_stop, why, kind):
    p = [[P_SURE, p_stop, P_SURE, P_BONUS], [P_SURE] * 3 + [P_BONUS]]
    q = [[P_SURE, q_stop, P_SURE], [P_SURE] * 3]
    us = [u_row([0.5] * 3, [0.5] * 3, 0.5)] * 2
    tokens, accepted, committed, error = run(p, q, [[0, 0, 0]] * 2, [3, 3], us)
    assert error == [True, False], why
    assert invalid_names(p, q, [[0, 0, 0]] * 2, [3, 3], us) == [kind, None], why
    assert tokens[0] == [-1] * 4 and accepted[0] == 0 and committed[0] == 0
    assert tokens[1] == [0, 0, 0, 3]  # the other row is unaffected


def test_invalid_bonus_law_sets_error():
    p = [[P_SURE, [0.0] * V, P_SURE, P_SURE], [P_SURE, [NAN] + [0.5] * 3, P_SURE, P_SURE]]
    q = [[P_SURE] * 3] * 2
    got = run(p, q, [[0, 0, 0]] * 2, [1, 1], [u_row([0.5] * 3, [0.5] * 3, 0.5)] * 2)
    assert got == ([[-1] * 4] * 2, [0, 0], [0, 0], [True, True])
    assert invalid_names(p, q, [[0, 0, 0]] * 2, [1, 1], [u_row([0.5] * 3, [0.5] * 3, 0.5)] * 2) == [
        "zero_mass",
        "non_finite",
    ]


@pytest.mark.parametrize("bad_id", [V, 17, -1])
def test_out_of_range_draft_is_rejected_and_corrected(bad_id):
    p = [[P_SURE, [0.0, 0.0, 0.5, 0.5], P_SURE, P_BONUS]]
    q = [[P_SURE, [0.0, 0.0, 0.5, 0.5], P_SURE]]  # residual 0 -> error ...
    got = run(p, q, [[0, bad_id, 0]], [3], [u_row([0.0] * 3, [0.9] * 3, 0.5)])
    assert got == ([[-1] * 4], [0], [0], [True])
    q = [[P_SURE, [0.0, 1.0, 0.0, 0.0], P_SURE]]  # ... and with a live residual, a correction
    got = run(p, q, [[0, bad_id, 0]], [3], [u_row([0.0] * 3, [0.0, 0.9, 0.0], 0.5)])
    assert got == ([[0, 3, -1, -1]], [1], [2], [False])


def test_greedy_rows_reduce_to_greedy_acceptance():
    # One-hot p and q with zero uniforms: accept while the draft is the target argmax,
    # then commit the target argmax at the stop point.
    g = torch.Generator().manual_seed(5)
    B, k, v = 64, 4, 6
    target = torch.randint(0, v, (B, k + 1), generator=g)
    drafts = torch.where(
        torch.rand(B, k, generator=g) < 0.7, target[:, :k], torch.randint(0, v, (B, k), generator=g)
    )
    lens = torch.randint(0, k + 1, (B,), generator=g)
    p = torch.nn.functional.one_hot(target, v).float()
    q = torch.nn.functional.one_hot(drafts, v).float()
    out = speculative_accept(p, q, drafts, lens, torch.zeros(B, 2 * k + 1, dtype=torch.float64))
    for b in range(B):
        n = 0
        while n < lens[b] and drafts[b, n] == target[b, n]:
            n += 1
        want = drafts[b, :n].tolist() + [target[b, n].item()] + [-1] * (k - n)
        assert out.tokens[b].tolist() == want
        assert out.num_accepted[b] == n and out.num_committed[b] == n + 1
    assert not out.error.any()


def test_first_token_law_is_p_by_quadrature():
    # Integrate the kernel over a midpoint grid of (coin, correction u) for each draft x,
    # weighted by q(x): the committed first token's law must be p. The accept boundary
    # p/q = 1/7 and the residual's split at 1/4 fall between grid points of a 28-point
    # grid, so the quadrature is exact and the law equals p to float32 input precision.
    p0 = torch.tensor([0.1, 0.3, 0.6, 0.0])
    q0 = torch.tensor([0.7, 0.1, 0.0, 0.2])  # residual (p - q)+ = [0, 0.2, 0.6, 0]
    n = 28
    grid = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    coins, corr = (g.reshape(-1) for g in torch.meshgrid(grid, grid, indexing="ij"))
    m = n * n
    drafts = torch.arange(V).repeat_interleave(m)[:, None]  # every x, m cells each
    weight = q0.double().repeat_interleave(m) / m  # q(x) per cell
    uniforms = torch.stack([coins, corr, torch.full((m,), 0.5, dtype=torch.float64)], 1)
    p = torch.stack([p0, torch.tensor(P_BONUS)])[None].expand(V * m, 2, V)
    laws = {}
    for mutant in (None, "residual_from_p", "shared_uniform"):
        out = speculative_accept(
            p,
            q0[None, None].expand(V * m, 1, V),
            drafts,
            torch.ones(V * m, dtype=torch.int64),
            uniforms.repeat(V, 1),
            mutant=mutant,
        )
        laws[mutant] = torch.zeros(V, dtype=torch.float64).index_add_(0, out.tokens[:, 0], weight)
    assert (laws[None] - p0.double()).abs().max() < 1e-6
    assert (laws["residual_from_p"] - p0.double()).abs().max() > 0.05
    assert (laws["shared_uniform"] - p0.double()).abs().max() > 0.05


# --- kernel mutants --------------------------------------------------------------------


def test_mutant_residual_from_p_draws_the_correction_from_p():
    p = [[P_REJ, P_SURE, P_SURE, P_BONUS]]
    q = [[Q_REJ, P_SURE, P_SURE]]
    us = [u_row([0.5, 0, 0], [0.05, 0, 0], 0.5)]  # residual: token 1; p: token 0
    assert run(p, q, [[0, 0, 0]], [3], us)[0] == [[1, -1, -1, -1]]
    assert run(p, q, [[0, 0, 0]], [3], us, mutant="residual_from_p")[0] == [[0, -1, -1, -1]]


def test_mutant_bonus_off_by_one_draws_the_bonus_from_the_last_draft_position():
    p = [[P_SURE, one_hot(1), one_hot(3), P_SURE]]
    q = [[P_SURE, one_hot(1), P_SURE]]
    us = [u_row([0.5] * 3, [0.5] * 3, 0.5)]
    assert run(p, q, [[0, 1, 0]], [2], us)[0] == [[0, 1, 3, -1]]
    assert run(p, q, [[0, 1, 0]], [2], us, mutant="bonus_off_by_one")[0] == [[0, 1, 1, -1]]
    # draft_len 0 clamps at position 0: no change there (the mutant needs L >= 1).
    assert run(p, q, [[0, 1, 0]], [0], us, mutant="bonus_off_by_one")[0] == [[0, -1, -1, -1]]


def test_mutant_shared_uniform_reuses_the_rejecting_coin():
    p = [[P_REJ, P_SURE, P_SURE, P_BONUS]]
    q = [[Q_REJ, P_SURE, P_SURE]]
    us = [u_row([0.9, 0, 0], [0.1, 0, 0], 0.5)]  # coin 0.9 -> token 2; u[K] 0.1 -> token 1
    assert run(p, q, [[0, 0, 0]], [3], us)[0] == [[1, -1, -1, -1]]
    assert run(p, q, [[0, 0, 0]], [3], us, mutant="shared_uniform")[0] == [[2, -1, -1, -1]]


def test_unknown_mutant_is_refused():
    p = torch.full((1, 2, V), 0.25)
    args = (
        p,
        p[:, :1],
        torch.zeros(1, 1, dtype=torch.int64),
        torch.ones(1, dtype=torch.int64),
        torch.zeros(1, 3, dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="unknown kernel mutant 'nope'.*residual_from_p"):
        speculative_accept(*args, mutant="nope")
    for name in KERNEL_MUTANTS:
        speculative_accept(*args, mutant=name)


# --- no host reads, inputs untouched, argument checks ----------------------------------


def _random_case(seed=0, B=6):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    drafts = torch.randint(0, V, (B, K), generator=g)
    lens = torch.randint(0, K + 1, (B,), generator=g)
    u = torch.rand(B, 2 * K + 1, dtype=torch.float64, generator=g)
    return p, q, drafts, lens, u


def test_makes_no_host_reads_and_leaves_inputs_untouched(monkeypatch):
    args = _random_case()
    clones = [a.clone() for a in args]
    with monkeypatch.context() as patch:
        forbid_host_reads(patch, "in speculative_accept")
        out = speculative_accept(*args)
    for before, after in zip(clones, args, strict=True):
        assert torch.equal(before, after)
    assert torch.equal(out.num_committed, out.num_accepted + 1)
    assert out.tokens.dtype == torch.int64 and out.error.dtype == torch.bool


@pytest.mark.parametrize(
    "index, replacement, message",
    [
        (0, torch.zeros(6, K + 1), "p must be \\[B, K\\+1, V\\]"),
        (0, torch.zeros(6, K, V), "p must be \\[B, K\\+1, V\\]"),
        (1, torch.zeros(6, K, V + 1), "q must be \\[B, K, V\\]"),
        (1, torch.zeros(6, K, V, dtype=torch.int64), "q must be a floating"),
        (2, torch.zeros(6, K), "drafts must be an integer"),
        (2, torch.zeros(6, dtype=torch.int64), "drafts must be \\[B, K\\]"),
        (3, torch.zeros(5, dtype=torch.int64), "draft_lens must be \\[B\\]"),
        (4, torch.zeros(6, 2 * K, dtype=torch.float64), "uniforms must be \\[B, 2K\\+1\\]"),
        (4, torch.zeros(6, 2 * K + 1, dtype=torch.float64, device="meta"), "same device"),
    ],
)
def test_validates_host_arguments(index, replacement, message):
    args = list(_random_case())
    args[index] = replacement
    with pytest.raises(ValueError, match=message):
        speculative_accept(*args)
