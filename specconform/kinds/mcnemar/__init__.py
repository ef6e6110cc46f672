"""The mcnemar kind: paired correctness on GSM8K (same questions and seeds in every
group), scored with lm-evaluation-harness's gsm8k_cot filters, compared pair by pair
with the exact McNemar test; accuracies with Wilson intervals; the detectable drop at
the protocol's size from the exact power."""

from specconform.protocol.schema_mcnemar import McNemarProtocol as Schema

from .evaluate import evaluate
from .paired import exact_mcnemar, wilson

__all__ = ["Schema", "evaluate", "exact_mcnemar", "seed_ranges", "wilson"]


def seed_ranges(model) -> list[tuple[str, int, int]]:
    """The ledger's ranges: every group answers the same trials, seeds
    offset + [0, questions x count)."""
    start = model.seeds.offset
    stop = start + model.dataset.questions * model.seeds.count
    return [(g.name, start, stop) for g in model.groups]
