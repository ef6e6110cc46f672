"""The sequence kind: every committed token of long generations, through the randomized
probability integral transform (docs/sequence.md).

Public seam: :func:`evaluate` (raw files -> Evaluation), :func:`evaluate_frames`
(in-memory frames -> Evaluation, used by calibration) and the protocol schema
:data:`Schema` (specconform/protocol/schema_sequence.py). The raw-file contract is
:mod:`.raw`.
"""

from specconform.protocol.schema_sequence import SequenceProtocol as Schema

from .evaluate import evaluate, evaluate_frames
from .stochastic import TESTS

__all__ = ["Schema", "TESTS", "evaluate", "evaluate_frames", "seed_ranges"]


def seed_ranges(model) -> list[tuple[str, int, int]]:
    """The ledger's ranges: a group's seeds are offset + seed_offset + [0, requests)."""
    out = []
    for g in model.groups:
        start = model.seeds.offset + g.seed_offset
        out.append((g.name, start, start + model.group_requests(g)))
    return out
