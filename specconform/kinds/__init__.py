"""Protocol kinds, registered in one table (:data:`KINDS`).

Each kind is a package ``specconform.kinds.<kind>`` with its pydantic ``Schema`` (kept
in specconform/protocol/schema.py), ``evaluate(protocol, raw) -> Evaluation`` and its
typed records; its runner lives in specconform/runner (the only layer that touches
torch). `reevaluate` is the single entry point `run` and `verify` share: it recomputes
every test and the verdict from a run's raw data, so an archive's verdict can be
re-derived on a laptop with numpy, scipy and pandas alone.

Archives of the first results schema (a distribution protocol.json without
``verdict``) are re-derived by the frozen schema-1 evaluator
(:mod:`specconform.kinds.distribution.legacy`), so that their stated rows still verify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specconform.kinds import (
    distribution,
    equality,
    mcnemar,
    montecarlo,
    performance,
    quadrature,
    sequence,
)
from specconform.kinds.distribution import legacy
from specconform.results import Evaluation, RawData


@dataclass(frozen=True)
class Kind:
    name: str
    schema: type  # the pydantic model of its protocol files
    evaluate: Callable[[dict, RawData], Evaluation]


KINDS: dict[str, Kind] = {
    k.__name__.rsplit(".", 1)[1]: Kind(k.__name__.rsplit(".", 1)[1], k.Schema, k.evaluate)
    for k in (quadrature, montecarlo, distribution, equality, performance, sequence, mcnemar)
}


def is_schema1(protocol: dict) -> bool:
    """Whether a protocol predates family-wise verdicts (no ``verdict`` entry)."""
    return "verdict" not in protocol


def reevaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute tests and verdict from the validated protocol (as JSON data) and raw
    files. Raises KeyError/ValueError on raw data that does not fit the protocol."""
    kind = protocol.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown protocol kind {kind!r}; known: {sorted(KINDS)}")
    if kind == "distribution" and is_schema1(protocol):
        return legacy.evaluate(protocol, raw)
    return KINDS[kind].evaluate(protocol, raw)
