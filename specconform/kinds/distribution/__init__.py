"""The distribution kind (t1/t2/t3, homogeneity, acceptance, joint; see DESIGN.md).

Public seam: :func:`evaluate` (raw files -> Evaluation), :func:`evaluate_frames`
(in-memory samples and reference -> Evaluation, used by calibration), :class:`Reference`
and the protocol schema :data:`Schema` (kept in specconform/protocol/schema.py).
"""

from specconform.protocol.schema import DistributionProtocol as Schema
from specconform.stats.reference import Reference

from .evaluate import TESTS, evaluate, evaluate_frames

__all__ = ["Reference", "Schema", "TESTS", "evaluate", "evaluate_frames", "seed_ranges"]


def seed_ranges(model) -> list[tuple[str, int, int]]:
    """The ledger's ranges: a group's seeds are offset + seed_offset + [0, count)
    (`runner.distribution.group_seeds`)."""
    out = []
    for g in model.groups:
        start = model.seeds.offset + g.seed_offset
        out.append((g.name, start, start + model.seeds.count))
    return out
