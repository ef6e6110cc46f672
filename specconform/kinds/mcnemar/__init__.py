"""The mcnemar kind: paired correctness on GSM8K (same questions and seeds in every
group), scored with lm-evaluation-harness's gsm8k_cot filters, compared pair by pair
with the exact McNemar test; accuracies with Wilson intervals; the detectable drop at
the protocol's size from the exact power."""

from specconform.protocol.schema_mcnemar import McNemarProtocol as Schema

from .evaluate import evaluate
from .paired import exact_mcnemar, wilson

__all__ = ["Schema", "evaluate", "exact_mcnemar", "wilson"]
