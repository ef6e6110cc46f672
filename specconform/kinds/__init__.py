"""Protocol kinds, registered in one table (:data:`KINDS`, :mod:`.registry`).

Each kind is a package ``specconform.kinds.<kind>`` with its pydantic ``Schema`` (kept
in specconform/protocol), ``evaluate(protocol, raw) -> Evaluation`` and its typed
records; its collector lives in specconform/runner (the only layer that touches torch).
`reevaluate` is the single entry point `run` and `verify` share: it recomputes every
test and the verdict from a run's raw data, so an archive's verdict can be re-derived
on a laptop with numpy, scipy and pandas alone.

Archives of the first results schema (a distribution protocol.json without
``verdict``) are re-derived by the kind's frozen schema-1 evaluator
(:mod:`specconform.kinds.distribution.legacy`), so that their stated rows still verify.
"""

from __future__ import annotations

from specconform.kinds.registry import KINDS, Capabilities, Kind, Ref, is_schema1, kind_of
from specconform.results import Evaluation, RawData

__all__ = ["KINDS", "Capabilities", "Kind", "Ref", "is_schema1", "kind_of", "reevaluate"]


def reevaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute tests and verdict from the validated protocol (as JSON data) and raw
    files. Raises KeyError/ValueError on raw data that does not fit the protocol."""
    return kind_of(protocol.get("kind")).evaluate_protocol(protocol, raw)
