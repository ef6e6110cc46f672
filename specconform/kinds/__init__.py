"""Protocol kinds: each is data (its YAML) plus a thin runner and a torch-free evaluator.

`reevaluate` is the single entry point `run` and `verify` share: it recomputes every
test and the verdict from a run's raw data, so an archive's verdict can be re-derived on
a laptop with numpy, scipy and pandas alone.
"""
from __future__ import annotations

import importlib

from specconform.results import Evaluation, RawData

EVALUATORS = {
    "quadrature": "specconform.kinds.quadrature_eval",
    "montecarlo": "specconform.kinds.montecarlo_eval",
    "distribution": "specconform.kinds.distribution_eval",
}


def reevaluate(protocol: dict, raw: RawData) -> Evaluation:
    """Recompute tests and verdict from the validated protocol (as JSON data) and raw
    files. Raises KeyError/ValueError on raw data that does not fit the protocol."""
    kind = protocol.get("kind")
    if kind not in EVALUATORS:
        raise ValueError(f"unknown protocol kind {kind!r}")
    return importlib.import_module(EVALUATORS[kind]).evaluate(protocol, raw)
