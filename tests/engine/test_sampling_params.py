"""SamplingParams: defaults, normalisation and one clear ValueError per bad field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine_under_test.params import SamplingParams


def test_defaults_follow_the_contract():
    p = SamplingParams()
    assert (
        p.temperature,
        p.top_k,
        p.top_p,
        p.seed,
        p.max_tokens,
        p.stop_token_ids,
        p.ignore_eos,
    ) == (1.0, 0, 1.0, None, 16, (), False)
    assert not p.greedy


def test_values_are_normalised_so_equal_requests_compare_equal():
    a = SamplingParams(
        temperature=1,
        top_k=np.int64(5),
        top_p=np.float32(0.5),
        seed=np.int64(3),
        stop_token_ids=[2, 3],
    )
    b = SamplingParams(temperature=1.0, top_k=5, top_p=0.5, seed=3, stop_token_ids=(2, 3))
    assert a == b and hash(a) == hash(b)
    assert type(a.temperature) is float and type(a.top_k) is int and type(a.seed) is int
    assert a.stop_token_ids == (2, 3)


def test_greedy_means_float32_temperature_zero():
    assert SamplingParams(temperature=0.0).greedy
    assert SamplingParams(temperature=1e-50).greedy  # underflows float32, as on device
    assert not SamplingParams(temperature=1e-30).greedy


def test_boundaries_that_are_valid():
    SamplingParams(temperature=0.0, top_k=-5, top_p=1.0, seed=0, max_tokens=1)
    SamplingParams(top_p=1e-9, seed=2**63 - 1, ignore_eos=True, stop_token_ids=(0,))


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("temperature", 1e39),
        ("temperature", "1.0"),
        ("temperature", True),
        ("top_k", 1.5),
        ("top_k", True),
        ("top_k", None),
        ("top_p", 0.0),
        ("top_p", -0.5),
        ("top_p", 1.0001),
        ("top_p", float("nan")),
        ("top_p", None),
        ("seed", -1),
        ("seed", 2**63),
        ("seed", 1.0),
        ("seed", True),
        ("max_tokens", 0),
        ("max_tokens", 2.0),
        ("max_tokens", False),
        ("stop_token_ids", (1, -2)),
        ("stop_token_ids", (1.0,)),
        ("stop_token_ids", "12"),
        ("stop_token_ids", 5),
        ("stop_token_ids", (True,)),
        ("ignore_eos", 1),
        ("ignore_eos", None),
    ],
)
def test_each_bad_field_raises_a_value_error_naming_it(field, value):
    with pytest.raises(ValueError, match=f"^{field} must"):
        SamplingParams(**{field: value})


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SamplingParams().temperature = 0.5


def test_with_seed_equals_a_fresh_construction():
    base = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_tokens=3, ignore_eos=True)
    for seed in (None, 0, 12345, 2**63 - 1):
        got = base.with_seed(seed)
        want = SamplingParams(
            temperature=0.7, top_k=20, top_p=0.9, seed=seed, max_tokens=3, ignore_eos=True
        )
        assert got == want and hash(got) == hash(want) and got.seed == seed
    assert base.seed is None  # the base is untouched (a frozen value)


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True, "3"])
def test_with_seed_refuses_what_the_constructor_refuses(seed):
    base = SamplingParams()
    with pytest.raises(ValueError, match="seed"):
        SamplingParams(seed=seed)
    with pytest.raises(ValueError, match="seed"):
        base.with_seed(seed)
