"""Per-request sampling parameters, validated once at construction.

`SamplingParams` is a frozen value: the engine reads it at admission and copies the
numbers it needs into per-slot device tensors, so nothing validated here can drift
afterwards. Every check raises a `ValueError` that names the offending field.

Conventions (docs/contracts.md, section 1): ``temperature == 0`` means greedy,
``top_k <= 0`` means top-k is off, ``top_p == 1.0`` means top-p is off.
"""

from __future__ import annotations

import math
import numbers
import struct
from dataclasses import dataclass

SEED_LIMIT = 2**63  # seeds live in an int64 device tensor: [0, 2**63)
_F32 = struct.Struct("f")


def to_float32(value: float) -> float:
    """`value` rounded to the nearest float32 (inf past the float32 range).

    The sampling law lives in float32: temperature and top_p reach the device as
    float32 tensors, so the serial reference rounds them the same way.
    """
    # struct's "f" is C's double -> float conversion (round to nearest even, as
    # np.float32): 0.3 us against numpy's 3.8 us under errstate, and a 5,000-request
    # batch converts 20,000 times. It refuses only a finite value that rounds past the
    # float32 range, which np.float32 maps to inf.
    try:
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _is_int(value: object) -> bool:
    # bool is an int subclass; a flag passed where a count belongs is a caller bug.
    # type() first: the ABC check costs ~1 us, 5 per request, 5,000 requests a batch.
    return type(value) is int or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool)
    )


def _is_real(value: object) -> bool:
    return type(value) in (float, int) or (
        isinstance(value, numbers.Real) and not isinstance(value, bool)
    )


def _checked_seed(seed: object) -> int | None:
    if seed is None:
        return None
    if not _is_int(seed):
        raise ValueError(f"seed must be None or an int, got {seed!r}")
    if not 0 <= int(seed) < SEED_LIMIT:  # type: ignore[call-overload]
        raise ValueError(f"seed must be in [0, 2**63), got {seed!r}")
    return int(seed)  # type: ignore[call-overload]


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples.

    temperature:    float >= 0, finite; 0 means greedy (argmax, no generator).
    top_k:          int; keep every logit >= the k-th largest; <= 0 means off.
    top_p:          float in (0, 1]; keep the smallest descending prefix whose mass
                    reaches top_p (after top-k); 1.0 means off.
    seed:           None or int in [0, 2**63); keys the request's own Philox stream.
    max_tokens:     int >= 1; generated tokens at most.
    stop_token_ids: tuple of ints >= 0 (a list is accepted and stored as a tuple).
    ignore_eos:     bool; keep generating past EOS.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        # Normalise through object.__setattr__ (frozen) so that equal requests compare
        # equal and hash alike whatever numeric types the caller used.
        if not _is_real(self.temperature):
            raise ValueError(f"temperature must be a real number, got {self.temperature!r}")
        temperature = float(self.temperature)
        # Finite in float32 too: the law divides float32 logits by float32(temperature).
        if not math.isfinite(to_float32(temperature)) or temperature < 0.0:
            raise ValueError(
                f"temperature must be finite (in float32) and >= 0, got {self.temperature!r}"
            )
        object.__setattr__(self, "temperature", temperature)

        if not _is_int(self.top_k):
            raise ValueError(f"top_k must be an int (<= 0 means off), got {self.top_k!r}")
        object.__setattr__(self, "top_k", int(self.top_k))

        if not _is_real(self.top_p):
            raise ValueError(f"top_p must be a real number in (0, 1], got {self.top_p!r}")
        top_p = float(self.top_p)
        if not (0.0 < top_p <= 1.0):  # also rejects NaN
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "top_p", top_p)

        object.__setattr__(self, "seed", _checked_seed(self.seed))

        if not _is_int(self.max_tokens) or int(self.max_tokens) < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        object.__setattr__(self, "max_tokens", int(self.max_tokens))

        if isinstance(self.stop_token_ids, (str, bytes)) or not isinstance(
            self.stop_token_ids, (tuple, list)
        ):
            raise ValueError(
                f"stop_token_ids must be a tuple of ints >= 0, got {self.stop_token_ids!r}"
            )
        for token in self.stop_token_ids:
            if not _is_int(token) or int(token) < 0:
                raise ValueError(
                    f"stop_token_ids must hold ints >= 0, got {token!r} in {self.stop_token_ids!r}"
                )
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")

    def with_seed(self, seed: int | None) -> SamplingParams:
        """These parameters under another seed. Only the seed is checked: the other
        fields were validated when this value was built. A protocol's batch builds 5,000
        requests that differ in their seed alone: 0.56 us a request this way against
        3.15 us for a full construction (timeit, side by side, 2 CPU cores)."""
        out = object.__new__(SamplingParams)
        out.__dict__.update(self.__dict__)  # a frozen value: filled without __setattr__
        out.__dict__["seed"] = _checked_seed(seed)
        return out

    @property
    def greedy(self) -> bool:
        """True when the request is greedy: its float32 temperature is 0.

        A greedy request acquires no generator. The test is on the float32 value, the
        one the sampling core sees, so a temperature that underflows float32 is greedy
        on the host exactly when it is greedy on the device.
        """
        return to_float32(self.temperature) == 0.0
