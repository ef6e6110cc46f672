"""The quadrature kind: grid-integrated output laws of a white-box accept kernel against
the exact laws, within the grid's bound (deterministic, no p-values)."""

from specconform.protocol.schema import QuadratureProtocol as Schema

from .evaluate import STATISTIC, evaluate, evaluate_case

__all__ = ["STATISTIC", "Schema", "evaluate", "evaluate_case"]
