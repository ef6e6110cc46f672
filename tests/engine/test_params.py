"""SamplingParams' number checks: ``params.to_float32`` rounds exactly as ``np.float32``
does (the device's float32: nearest-even, subnormals, the signed zero, inf past the
float32 range, NaN kept), and the int/real checks take numpy scalars but not flags."""

from __future__ import annotations

import math
import random

import numpy as np

from engine_under_test.params import SamplingParams, to_float32

FLT_MAX = float(np.finfo(np.float32).max)
EDGES = [
    0.0,
    -0.0,
    0.1,
    1e-46,  # below the smallest subnormal: rounds to 0
    -1e-46,
    2.0**-149 * 1.5,  # halfway between two subnormals: ties to even
    2.0**-150,  # halfway to 0: ties to even (0)
    FLT_MAX,
    3.4028235677973362e38,  # just below halfway to 2**128: rounds down to FLT_MAX
    3.4028235677973366e38,  # halfway: ties to even, i.e. to 2**128 = inf
    1e39,
    -1e39,
    1e308,
    math.inf,
    -math.inf,
]


def _numpy_float32(value: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def test_to_float32_equals_numpy_on_edges_and_random_values():
    rng = random.Random(0)
    values = EDGES + [math.ldexp(rng.random(), rng.randint(-160, 130)) for _ in range(20_000)]
    values += [-v for v in values]
    for value in values:
        expected = _numpy_float32(value)
        got = to_float32(value)
        assert got == expected and math.copysign(1.0, got) == math.copysign(1.0, expected), value
    assert math.isnan(to_float32(math.nan))


def test_float32_range_decides_validation_and_greedy():
    assert SamplingParams(temperature=1e-46).greedy  # underflows float32: greedy
    assert not SamplingParams(temperature=1e-45).greedy  # the smallest subnormal
    for too_hot in (1e39, 3.4028235677973366e38):
        try:
            SamplingParams(temperature=too_hot)
        except ValueError as exc:
            assert "temperature must be finite (in float32)" in str(exc)
        else:
            raise AssertionError(f"temperature={too_hot} accepted")
    SamplingParams(temperature=3.4028235677973362e38)  # rounds to FLT_MAX: finite


def test_counts_take_numpy_integers_but_not_flags():
    params = SamplingParams(temperature=np.float32(0.5), top_k=np.int64(20), seed=np.int64(7))
    assert (params.temperature, params.top_k, params.seed) == (0.5, 20, 7)
    assert type(params.top_k) is int and type(params.seed) is int
    for field, flag in (("top_k", True), ("max_tokens", True), ("seed", False)):
        try:
            SamplingParams(**{field: flag})
        except ValueError as exc:
            assert field in str(exc)
        else:
            raise AssertionError(f"{field}={flag!r} accepted")
    try:
        SamplingParams(temperature=True)
    except ValueError as exc:
        assert "temperature must be a real number" in str(exc)
    else:
        raise AssertionError("temperature=True accepted")
