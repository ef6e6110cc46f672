"""The discriminated union of every protocol kind's schema (selected by ``kind``).

One line per kind: a kind's schema lives in specconform/protocol/schema.py or in its own
``schema_<kind>.py``; adding a kind adds its model here and to ``KIND_NAMES``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specconform.protocol.schema import (
    DistributionProtocol,
    EqualityProtocol,
    MonteCarloProtocol,
    QuadratureProtocol,
)
from specconform.protocol.schema_mcnemar import McNemarProtocol
from specconform.protocol.schema_performance import PerformanceProtocol
from specconform.protocol.schema_sequence import SequenceProtocol
from specconform.protocol.schema_tree import TreeProtocol

Protocol = Annotated[
    QuadratureProtocol
    | MonteCarloProtocol
    | DistributionProtocol
    | EqualityProtocol
    | SequenceProtocol
    | PerformanceProtocol
    | McNemarProtocol
    | TreeProtocol,
    Field(discriminator="kind"),
]

KIND_NAMES: tuple[str, ...] = (
    "quadrature",
    "montecarlo",
    "distribution",
    "equality",
    "sequence",
    "performance",
    "mcnemar",
    "tree",
)
