"""Where a run differs: a typed diagnosis for every failing or inconclusive row,
computed from the archive alone (no engine, no torch), shown by the terminal table,
JUnit, the pytest plugin, the HTML and pull-request reports; `specconform replay`
re-runs one of them."""

from __future__ import annotations

from .compute import diagnose, needs_diagnosis
from .model import Cell, Diagnosis, Divergence, Offender, Stratum

__all__ = [
    "Cell",
    "Diagnosis",
    "Divergence",
    "Offender",
    "Stratum",
    "diagnose",
    "diagnose_archive",
    "needs_diagnosis",
]


def diagnose_archive(contents) -> tuple[Diagnosis, ...]:
    """The diagnoses of an archive read by :func:`specconform.evidence.reader.read_archive`
    (``contents``: its ArchiveContents), from the evaluation it states."""
    protocol = contents.json_object("protocol.json") if "protocol.json" in contents.files else {}
    from .decode import decoder_for

    decode = decoder_for(protocol)
    return diagnose(protocol, contents.evaluation(), contents.raw_data(), decode)
