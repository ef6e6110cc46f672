"""The Monte Carlo kind: ragged multi-draft kernel runs against the analytic joint
accept/reject and bonus laws (Pearson χ², family-wise combined)."""

from specconform.protocol.schema import MonteCarloProtocol as Schema

from .evaluate import evaluate

__all__ = ["Schema", "evaluate"]
