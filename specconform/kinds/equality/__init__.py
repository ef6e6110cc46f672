"""The equality kind: greedy outputs token-identical between a base and a candidate
(configurations of one tree, or this tree against a git base), with the first divergence
of every prompt named. Deterministic: no sample size, no p-values."""

from specconform.protocol.schema import EqualityProtocol as Schema

from .evaluate import Divergence, comparisons, evaluate, first_divergence

__all__ = ["Divergence", "Schema", "comparisons", "evaluate", "first_divergence"]
