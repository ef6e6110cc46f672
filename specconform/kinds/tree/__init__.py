"""The tree kind (issue 34): tree speculation (target only) against the exact tree
law, by quadrature over the injected uniforms or Monte Carlo; lossy samplers get a
total-variation distance with its interval (``max_tv``)."""

from specconform.details.tree import RECORDS
from specconform.protocol.schema_tree import TreeProtocol as Schema

from .evaluate import evaluate

__all__ = ["RECORDS", "Schema", "evaluate"]
