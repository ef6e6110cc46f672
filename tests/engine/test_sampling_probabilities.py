"""Sampler.probabilities (serial reference) and batched_probabilities (device path).

The batched path must equal the reference row by row: same support, same
probabilities (bit for bit on CPU), inputs untouched, no host reads.
"""

from __future__ import annotations

import math

import pytest
import torch

from engine_under_test.params import SamplingParams
from engine_under_test.sampling import Sampler, batched_probabilities
from tests.engine.helpers import forbid_host_reads, small_tie_case


def reference(logits, temperature, top_k, top_p):
    """Sampler.probabilities row by row, with per-row parameters."""
    rows = [
        Sampler.probabilities(logits[i], SamplingParams(temperature=t, top_k=k, top_p=p))
        for i, (t, k, p) in enumerate(zip(temperature, top_k, top_p, strict=True))
    ]
    return torch.stack(rows)


def batched(logits, temperature, top_k, top_p):
    return batched_probabilities(
        logits,
        torch.tensor(temperature, dtype=torch.float32),
        torch.tensor(top_k, dtype=torch.int64),
        torch.tensor(top_p, dtype=torch.float32),
    )


def assert_same_law(got, want):
    assert got.dtype == torch.float32 and want.dtype == torch.float32
    assert torch.equal(got > 0, want > 0), "supports differ"
    assert torch.equal(got, want), f"max abs diff {(got - want).abs().max().item():.3g}"


# Mixed rows: greedy, truncating and non-truncating top-k / top-p, both together.
TEMPERATURE = [0.0, 1.0, 0.7, 1.3, 1.0, 1.5, 2.0, 2.0, 0.0, 0.9, 1.0, 0.3]
TOP_K = [5, 0, 3, 50, 0, 7, -1, 10_000, 0, 1, 2, 40]
TOP_P = [0.5, 1.0, 1.0, 1.0, 0.8, 0.9, 0.95, 0.6, 1.0, 0.5, 0.999, 0.05]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_batched_equals_reference_mixed_rows(dtype):
    g = torch.Generator().manual_seed(1234)
    logits = (torch.randn(len(TEMPERATURE), 257, generator=g) * 2.5).to(dtype)
    want = reference(logits, TEMPERATURE, TOP_K, TOP_P)
    got = batched(logits, TEMPERATURE, TOP_K, TOP_P)
    assert_same_law(got, want)
    torch.testing.assert_close(
        got.double().sum(-1), torch.ones(len(TEMPERATURE), dtype=torch.float64), atol=1e-6, rtol=0
    )
    # The rows really do differ in support size: the mix is what is being tested.
    sizes = (got > 0).sum(-1)
    assert sizes[0] == 1 and sizes[8] == 1 and sizes[1] == 257  # greedy, greedy, no filter
    assert sizes[2] == 3 and sizes[3] == 50  # top-k alone
    assert 1 < sizes[5] <= 7 and 1 < sizes[4] < 257 and 1 < sizes[7] < 257  # top-p cuts


def test_batched_equals_reference_tied_top_k_logits():
    # Low-precision logits tie often; top-k must keep every tie of the k-th value.
    g = torch.Generator().manual_seed(7)
    logits = torch.randint(-3, 4, (16, 40), generator=g).float()
    t = [1.0, 0.5, 2.0, 0.0] * 4
    k = [1, 2, 3, 5, 8, 13, 39, 40] * 2
    p = [1.0] * 8 + [0.4, 0.5, 0.7, 0.9, 0.2, 1.0, 0.99, 0.6]
    want = reference(logits, t, k, p)
    assert_same_law(batched(logits, t, k, p), want)
    # Ties do survive: with k=1, every copy of the row maximum is kept.
    row_max_count = (logits[0] == logits[0].max()).sum()
    assert (want[0] > 0).sum() == row_max_count


def test_batched_equals_reference_full_vocabulary():
    g = torch.Generator().manual_seed(99)
    logits = torch.randn(6, 49_152, generator=g) * 4
    t, k, p = (
        [1.0, 0.8, 0.0, 1.2, 1.0, 0.6],
        [0, 50, 0, 0, 1000, 20],
        [0.9, 1.0, 1.0, 0.5, 1.0, 0.95],
    )
    assert_same_law(batched(logits, t, k, p), reference(logits, t, k, p))


def test_top_k_keeps_ties_so_more_than_k_survive():
    logits = torch.tensor([3.0, 1.0, 3.0, 3.0, 0.0])
    probs = Sampler.probabilities(logits, SamplingParams(top_k=2))
    assert torch.equal(probs > 0, torch.tensor([True, False, True, True, False]))
    torch.testing.assert_close(probs[[0, 2, 3]], torch.full((3,), 1 / 3))


def test_top_p_applies_after_top_k():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    # Without top-k: mass 0.4 < 0.5, so the prefix needs two tokens.
    only_p = Sampler.probabilities(logits, SamplingParams(top_p=0.5))
    assert torch.equal(only_p > 0, torch.tensor([True, True, False, False]))
    torch.testing.assert_close(only_p[:2], torch.tensor([4 / 7, 3 / 7]))
    # top-k=2 first renormalises to (4/7, 3/7): 4/7 >= 0.5 already, one token.
    both = Sampler.probabilities(logits, SamplingParams(top_k=2, top_p=0.5))
    assert torch.equal(both, torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_top_p_smallest_prefix_and_ties_by_lower_index():
    # Four equal tokens of mass 0.25 (exact): top_p=0.5 is reached after two, and the
    # stable sort keeps the two lowest indices.
    logits = torch.tensor([float("-inf"), 5.0, 5.0, 5.0, 5.0])
    probs = Sampler.probabilities(logits, SamplingParams(top_p=0.5))
    support = probs > 0
    assert support.tolist() == [False, True, True, False, False]
    assert torch.equal(batched(logits[None], [1.0], [0], [0.5])[0], probs)
    # A prefix that already reaches top_p keeps the first token only.
    first = Sampler.probabilities(torch.tensor([2.0, 0.0, 0.0]), SamplingParams(top_p=0.1))
    assert first.tolist() == [1.0, 0.0, 0.0]


def test_top_p_one_is_off_even_for_a_subnormal_tail():
    logits = torch.tensor([0.0, 0.0, -100.0])  # exp(-100) is a positive float32 subnormal
    off = Sampler.probabilities(logits, SamplingParams(top_p=1.0))
    assert (off > 0).all()
    on = Sampler.probabilities(logits, SamplingParams(top_p=0.9999999))
    assert on[2] == 0 and (on[:2] > 0).all()
    assert_same_law(
        batched(logits[None].expand(2, 3), [1.0, 1.0], [0, 0], [1.0, 0.9999999]),
        torch.stack([off, on]),
    )


def test_greedy_is_one_hot_of_first_argmax_whatever_top_k_and_top_p():
    logits = torch.tensor([[0.5, 2.0, -1.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
    for params in (
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.0, top_k=1, top_p=0.1),
    ):
        probs = Sampler.probabilities(logits, params)
        assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    got = batched(logits, [0.0, 0.0], [3, 0], [0.2, 1.0])
    assert got.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def test_temperature_divides_in_float32():
    logits = torch.tensor([0.3, 1.7, -0.2], dtype=torch.bfloat16)
    probs = Sampler.probabilities(logits, SamplingParams(temperature=0.7))
    x = logits.float() / torch.tensor(0.7, dtype=torch.float32)
    assert torch.equal(probs, torch.softmax(x, -1))


def test_reference_shapes():
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(top_k=4)
    assert Sampler.probabilities(logits, params).shape == (3, 11)
    assert Sampler.probabilities(logits[1], params).shape == (11,)
    assert torch.equal(
        Sampler.probabilities(logits, params)[1], Sampler.probabilities(logits[1], params)
    )
    assert Sampler.probabilities(logits[:0], params).shape == (0, 11)


def test_batched_leaves_inputs_untouched_and_returns_a_new_tensor():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 64, generator=g)
    temperature = torch.tensor([0.0, 1.0, 0.5, 2.0, 1.0])
    top_k = torch.tensor([0, 3, 10, 0, 64])
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.2, 1.0])
    clones = [t.clone() for t in (logits, temperature, top_k, top_p)]
    out = batched_probabilities(logits, temperature, top_k, top_p)
    for before, after in zip(clones, (logits, temperature, top_k, top_p), strict=True):
        assert torch.equal(before, after)
    assert out.data_ptr() != logits.data_ptr()
    out.fill_(0)  # writing the result must not reach the caller's logits either
    assert torch.equal(logits, clones[0])


def test_batched_accepts_other_parameter_dtypes():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(5))
    want = batched(logits, [0.9, 0.0, 1.1], [4, 0, 0], [0.8, 1.0, 0.6])
    got = batched_probabilities(
        logits,
        torch.tensor([0.9, 0.0, 1.1], dtype=torch.float64),
        torch.tensor([4, 0, 0], dtype=torch.int32),
        torch.tensor([0.8, 1.0, 0.6], dtype=torch.float64),
    )
    assert torch.equal(got, want)


def test_batched_makes_no_host_reads(monkeypatch):
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(8))
    args = (
        logits,
        torch.tensor([0.0, 1.0, 0.5, 1.5]),
        torch.tensor([0, 5, 2, 0]),
        torch.tensor([1.0, 0.7, 1.0, 0.3]),
    )
    forbid_host_reads(monkeypatch, "on the batched path")
    batched_probabilities(*args)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: {**a, "logits": a["logits"][0]}, "logits must be \\[B, V\\]"),
        (lambda a: {**a, "logits": a["logits"].long()}, "logits must be a floating"),
        (lambda a: {**a, "logits": a["logits"][:, :0]}, "V >= 1"),
        (lambda a: {**a, "temperature": a["temperature"][:2]}, "temperature must be \\[B\\]"),
        (lambda a: {**a, "temperature": a["temperature"].long()}, "temperature must be a float"),
        (lambda a: {**a, "top_k": a["top_k"][None]}, "top_k must be \\[B\\]"),
        (lambda a: {**a, "top_k": a["top_k"].float()}, "top_k must be an integer"),
        (lambda a: {**a, "top_p": a["top_p"][1:]}, "top_p must be \\[B\\]"),
        (lambda a: {**a, "top_p": a["top_p"].to(torch.int64)}, "top_p must be a float"),
        (lambda a: {**a, "top_p": a["top_p"].to("meta")}, "same device"),
        (lambda a: {**a, "top_k": [1, 2, 3]}, "top_k must be a torch.Tensor"),
    ],
)
def test_batched_validates_host_arguments(change, message):
    args = {
        "logits": torch.zeros(3, 8),
        "temperature": torch.ones(3),
        "top_k": torch.zeros(3, dtype=torch.int64),
        "top_p": torch.ones(3),
    }
    with pytest.raises(ValueError, match=message):
        batched_probabilities(**change(args))


def test_reference_validates_arguments():
    with pytest.raises(ValueError, match="\\[V\\] or \\[N, V\\]"):
        Sampler.probabilities(torch.zeros(2, 3, 4), SamplingParams())
    with pytest.raises(ValueError, match="SamplingParams"):
        Sampler.probabilities(torch.zeros(4), {"temperature": 1.0})
    with pytest.raises(ValueError, match="floating"):
        Sampler.probabilities(torch.zeros(4, dtype=torch.int64), SamplingParams())


def test_rows_sum_to_one():
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(11)) * 5
    t, k, p = [0.2, 0.5, 1.0, 3.0] * 2, [0, 7] * 4, [1.0, 0.9, 0.3, 1.0] * 2
    sums = batched(logits, t, k, p).double().sum(-1)
    assert all(math.isclose(s, 1.0, abs_tol=1e-6) for s in sums.tolist())


def test_batched_equals_reference_on_many_random_configurations():
    # Small vocabularies with integer logits make ties in logits and in probabilities
    # common, so top-k ties and top-p cuts inside tie groups are exercised.
    logits, t, k, p = small_tie_case(torch.Generator().manual_seed(2024))
    want = reference(logits, t.tolist(), k.tolist(), p.tolist())
    assert_same_law(batched_probabilities(logits, t, k, p), want)


# --- host hints: max_top_k and any_top_p ------------------------------------------------


def _hinted_case(seed, kind, B=10, V=200):
    g = torch.Generator().manual_seed(seed)
    if kind == "normal":
        logits = torch.randn(B, V, generator=g) * 3
    elif kind == "bf16":  # bf16 logits tie often, at the k-th value too
        logits = (torch.randn(B, V, generator=g) * 2).to(torch.bfloat16)
    else:  # few distinct values: tie groups wider than max_top_k at the k-th value
        logits = torch.randint(0, 6, (B, V), generator=g).float() * 0.5
    max_top_k = int(torch.randint(1, 40, (1,), generator=g))
    k = torch.randint(1, max_top_k + 1, (B,), generator=g)
    t = (torch.rand(B, generator=g) * 2 + 0.05).where(torch.rand(B, generator=g) > 0.15, 0.0)
    k = torch.where(t == 0, torch.randint(-1, V + 2, (B,), generator=g), k)  # greedy: anything
    p = torch.rand(B, generator=g).clamp_min(0.01).where(torch.rand(B, generator=g) > 0.3, 1.0)
    return logits, t, k, p, max_top_k


@pytest.mark.parametrize("kind", ["normal", "bf16", "wide_ties"])
def test_max_top_k_hint_equals_the_reference_bit_for_bit(kind):
    # torch.topk(max_top_k) instead of full-row sorts; the top-p cut from the candidates
    # (ties at the k-th value past max_top_k included) must still be the reference's.
    for seed in range(12):
        logits, t, k, p, max_top_k = _hinted_case(seed, kind)
        want = reference(logits, t.tolist(), k.tolist(), p.tolist())
        assert_same_law(batched_probabilities(logits, t, k, p, max_top_k=max_top_k), want)
        # A loose bound is a valid hint too.
        assert_same_law(batched_probabilities(logits, t, k, p, max_top_k=max_top_k + 7), want)


def test_top_p_cut_inside_a_tie_group_wider_than_the_hint():
    # Token 0 leads, then 30 tokens tie at the k-th value: top_k=3 keeps all 31, and
    # top_p cuts inside the tie group, which holds more tokens than topk(3) returns.
    logits = torch.full((4, 64), -2.0)
    logits[:, 0] = 1.0
    logits[:, 10:40] = 0.0
    t, k = torch.ones(4), torch.full((4,), 3)
    p = torch.tensor([0.5, 0.8, 0.99, 1.0])
    want = reference(logits, t.tolist(), k.tolist(), p.tolist())
    assert (want[:3] > 0).sum(-1).tolist() != [31] * 3  # the cut is inside the group
    assert_same_law(batched_probabilities(logits, t, k, p, max_top_k=3), want)


def test_any_top_p_false_skips_top_p():
    for seed in range(6):
        logits, t, k, p, max_top_k = _hinted_case(seed, "bf16")
        p = torch.where(t == 0, p, 1.0)  # the promise: no non-greedy row uses top-p
        want = reference(logits, t.tolist(), k.tolist(), p.tolist())
        assert_same_law(batched_probabilities(logits, t, k, p, any_top_p=False), want)
        assert_same_law(
            batched_probabilities(logits, t, k, p, max_top_k=max_top_k, any_top_p=False), want
        )


def test_hints_keep_inputs_untouched_and_make_no_host_reads(monkeypatch):
    logits, t, k, p, max_top_k = _hinted_case(3, "normal")
    clones = [x.clone() for x in (logits, t, k, p)]
    with monkeypatch.context() as patch:
        forbid_host_reads(patch, "on the batched path")
        batched_probabilities(logits, t, k, p, max_top_k=max_top_k)
        batched_probabilities(logits, t, k, p, max_top_k=max_top_k, any_top_p=False)
    for before, after in zip(clones, (logits, t, k, p), strict=True):
        assert torch.equal(before, after)


@pytest.mark.parametrize(
    "hints, message",
    [
        ({"max_top_k": 0}, "max_top_k must be None or an int >= 1"),
        ({"max_top_k": 2.0}, "max_top_k must be None or an int >= 1"),
        ({"max_top_k": True}, "max_top_k must be None or an int >= 1"),
        ({"any_top_p": None}, "any_top_p must be a bool"),
    ],
)
def test_hints_are_validated(hints, message):
    args = (torch.zeros(3, 8), torch.ones(3), torch.zeros(3, dtype=torch.int64), torch.ones(3))
    with pytest.raises(ValueError, match=message):
        batched_probabilities(*args, **hints)
