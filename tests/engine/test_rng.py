"""Philox4x32-10 (known-answer vectors) and the request-owned RngRegistry."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from engine_under_test.sampling import RngRegistry, philox_uniforms
from engine_under_test.sampling.philox import philox4x32_10, words_to_uniforms
from engine_under_test.sampling.rng import philox_uniforms_torch
from tests.engine.helpers import forbid_host_reads

# Random123's kat_vectors for philox4x32 with 10 rounds: counter (4 words), key (2
# words), expected output (4 words).
PHILOX_KAT = [
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX_KAT)
def test_philox4x32_10_known_answers(counter, key, expected):
    out = philox4x32_10(
        torch.tensor(counter, dtype=torch.int64), torch.tensor(key, dtype=torch.int64)
    )
    assert tuple(out.tolist()) == expected


def test_philox_known_answers_batched():
    counters = torch.tensor([c for c, _, _ in PHILOX_KAT], dtype=torch.int64)
    keys = torch.tensor([k for _, k, _ in PHILOX_KAT], dtype=torch.int64)
    assert [tuple(r) for r in philox4x32_10(counters, keys).tolist()] == [
        e for _, _, e in PHILOX_KAT
    ]


def test_words_to_uniforms_range_and_resolution():
    a = torch.tensor([0, 0xFFFFFFFF, 0x80000000, 0], dtype=torch.int64)
    b = torch.tensor([0, 0xFFFFFFFF, 0, 0x40], dtype=torch.int64)
    assert words_to_uniforms(a, b).tolist() == [0.0, 1.0 - 2.0**-53, 0.5, 2.0**-53]


def test_uniforms_shape_dtype_range_and_layout():
    seeds = torch.tensor([0, 1, 2**63 - 1], dtype=torch.int64)
    rounds = torch.tensor([0, 7, 2**40], dtype=torch.int64)
    u = philox_uniforms(seeds, rounds, 9)
    assert u.shape == (3, 9) and u.dtype == torch.float64
    assert ((u >= 0) & (u < 1)).all()
    # Counter index i gives u[2i], u[2i+1]: a shorter block is a prefix of a longer one.
    assert torch.equal(philox_uniforms(seeds, rounds, 4), u[:, :4])
    assert philox_uniforms(seeds, rounds, 0).shape == (3, 0)
    # The stream is the Philox output of counter (index, round lo, round hi, DOMAIN).
    from engine_under_test.sampling.philox import DOMAIN

    words = philox4x32_10(torch.tensor([3, 7, 0, DOMAIN]), torch.tensor([1, 0]))
    assert u[1, 6] == words_to_uniforms(words[0], words[1])
    assert u[1, 7] == words_to_uniforms(words[2], words[3])


def test_same_seed_and_round_same_uniforms_and_every_bit_of_the_key_matters():
    seeds = torch.tensor([5, 5, 5 + 2**32, 6, 5], dtype=torch.int64)
    rounds = torch.tensor([3, 3, 3, 3, 3 + 2**32], dtype=torch.int64)
    u = philox_uniforms(seeds, rounds, 5)
    assert torch.equal(u[0], u[1])
    for other in (2, 3, 4):  # seed high word, seed low word, round high word
        assert not torch.equal(u[0], u[other])


def test_row_uniforms_do_not_depend_on_the_rest_of_the_batch():
    g = torch.Generator().manual_seed(0)
    seeds = torch.randint(0, 2**62, (16,), generator=g)
    rounds = torch.randint(0, 1000, (16,), generator=g)
    together = philox_uniforms(seeds, rounds, 7)
    for i in (0, 5, 15):
        alone = philox_uniforms(seeds[i : i + 1], rounds[i : i + 1], 7)
        assert torch.equal(alone[0], together[i])
    perm = torch.randperm(16, generator=g)
    assert torch.equal(philox_uniforms(seeds[perm], rounds[perm], 7), together[perm])


def test_uniforms_look_uniform():
    # A sanity check of the construction (not a randomness test suite): one stream of
    # 40,000 uniforms passes a Kolmogorov-Smirnov test at a deterministic seed.
    u = philox_uniforms(torch.tensor([12345]), torch.tensor([0]), 40_000)[0]
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3
    rows = philox_uniforms(torch.arange(2000), torch.zeros(2000, dtype=torch.int64), 1)[:, 0]
    assert stats.kstest(rows.numpy(), "uniform").pvalue > 1e-3


def test_philox_validates_arguments():
    s = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="seeds must be \\[B\\]"):
        philox_uniforms(s[None], s[None], 2)
    with pytest.raises(ValueError, match="rounds must be \\[B\\]"):
        philox_uniforms(s, s[:2], 2)
    with pytest.raises(ValueError, match="seeds must be an integer"):
        philox_uniforms(s.double(), s, 2)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        philox_uniforms(s, s, -1)
    with pytest.raises(ValueError, match="same device"):
        philox_uniforms(s, s.to("meta"), 2)


def test_torch_path_is_the_public_path_on_cpu():
    s, r = torch.tensor([9, 10]), torch.tensor([1, 2])
    assert torch.equal(philox_uniforms(s, r, 5), philox_uniforms_torch(s, r, 5))


# --- RngRegistry -----------------------------------------------------------------------


def test_registry_draws_the_slot_stream_round_after_round():
    reg = RngRegistry(num_draws=7, max_slots=4)
    reg.bind(2, 1234)
    slots = torch.tensor([2])
    first, second = reg.draw(slots), reg.draw(slots)
    assert torch.equal(first, philox_uniforms(torch.tensor([1234]), torch.tensor([0]), 7))
    assert torch.equal(second, philox_uniforms(torch.tensor([1234]), torch.tensor([1]), 7))
    assert reg.round.tolist() == [0, 0, 2, 0]


def test_registry_isolation_across_slots_and_batch_composition():
    # The same request (seed 77) alone in slot 5, or in slot 0 next to others, in any
    # row order: the same uniforms round by round.
    alone = RngRegistry(5, 8)
    alone.bind(5, 77)
    crowded = RngRegistry(5, 8)
    crowded.bind(0, 77)
    crowded.bind(3, 1)
    crowded.bind(6, 2**62)
    for round_ in range(3):
        want = alone.draw(torch.tensor([5]))[0]
        order = [3, 0, 6] if round_ % 2 else [6, 3, 0]
        got = crowded.draw(torch.tensor(order))
        assert torch.equal(got[order.index(0)], want)
        assert not torch.equal(got[order.index(3)], want)


def test_greedy_rows_draw_zeros_and_do_not_advance():
    reg = RngRegistry(3, 4)
    reg.bind(1, 42)
    slots = torch.tensor([0, 1, 2])  # slot 0 and 2: greedy requests, never bound
    u = reg.draw(slots)
    assert torch.equal(u[0], torch.zeros(3, dtype=torch.float64)) and torch.equal(u[2], u[0])
    assert (u[1] > 0).all()
    assert reg.round.tolist() == [0, 1, 0, 0]
    # An explicit mask can mark a bound row greedy for a round: zeros, no advance.
    u = reg.draw(slots, torch.tensor([True, False, True]))
    assert torch.equal(u, torch.zeros(3, 3, dtype=torch.float64))
    assert reg.round.tolist() == [0, 1, 0, 0]
    # ... and an unbound slot stays greedy even when the mask says random.
    reg.draw(torch.tensor([3]), torch.tensor([True]))
    assert reg.round.tolist() == [0, 1, 0, 0]


def test_release_rebind_and_rewind():
    reg = RngRegistry(2, 2)
    reg.bind(0, 9)
    a = reg.draw(torch.tensor([0]))
    reg.rewind(torch.tensor([0]))  # a failed round does not advance the slot
    assert torch.equal(reg.draw(torch.tensor([0])), a)
    reg.release(0)
    assert reg.round.tolist() == [0, 0] and reg.random_mask.tolist() == [False, False]
    assert torch.equal(reg.draw(torch.tensor([0])), torch.zeros(1, 2, dtype=torch.float64))
    reg.bind(0, 9)  # a new request with the same seed starts its stream from round 0
    assert torch.equal(reg.draw(torch.tensor([0])), a)


def test_bind_many_and_release_many_equal_one_slot_at_a_time():
    one, many = RngRegistry(3, 6), RngRegistry(3, 6)
    for slot, seed in ((4, 11), (1, 2**62 + 5), (2, 0)):
        one.bind(slot, seed)
    many.bind_many([4, 1, 2], [11, 2**62 + 5, 0])
    slots = torch.tensor([1, 2, 4, 0])
    assert torch.equal(one.draw(slots), many.draw(slots))
    one.release(1)
    one.release(4)
    many.release_many([1, 4])
    for reg in (one, many):
        assert reg.random_mask.tolist() == [False, False, True, False, False, False]
    assert torch.equal(one.draw(slots), many.draw(slots))
    many.bind_many([], [])  # nothing to do: no upload, no error
    many.release_many([])
    with pytest.raises(ValueError, match="2 slots but 1 seeds"):
        many.bind_many([0, 1], [5])
    with pytest.raises(ValueError, match="a slot is listed twice"):
        many.bind_many([3, 3], [1, 2])
    with pytest.raises(ValueError, match="slot must be an int in \\[0, 6\\)"):
        many.release_many([0, 6])


def test_registry_draw_makes_no_host_reads(monkeypatch):
    reg = RngRegistry(5, 3)
    reg.bind(0, 3)
    reg.bind(2, 4)
    forbid_host_reads(monkeypatch, "in RngRegistry.draw")
    reg.draw(torch.tensor([2, 1, 0]), torch.tensor([True, False, True]))


def test_registry_validates_host_arguments():
    with pytest.raises(ValueError, match="num_draws"):
        RngRegistry(0, 4)
    with pytest.raises(ValueError, match="max_slots"):
        RngRegistry(3, 0)
    reg = RngRegistry(3, 4)
    with pytest.raises(ValueError, match="slot must be an int in \\[0, 4\\)"):
        reg.bind(4, 1)
    with pytest.raises(ValueError, match="seed must be an int in \\[0, 2\\*\\*63\\)"):
        reg.bind(0, -1)
    with pytest.raises(ValueError, match="seed must be an int"):
        reg.bind(0, None)
    with pytest.raises(ValueError, match="slot must be"):
        reg.release(-1)
    with pytest.raises(ValueError, match="slots must be an integer"):
        reg.draw(torch.tensor([0.0]))
    with pytest.raises(ValueError, match="random_mask must be a bool"):
        reg.draw(torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(ValueError, match="random_mask must be \\[B\\]"):
        reg.draw(torch.tensor([0]), torch.tensor([True, False]))
