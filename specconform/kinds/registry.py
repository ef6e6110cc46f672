"""The one table of protocol kinds: :data:`KINDS`, one :class:`Kind` per line.

A kind is everything specconform knows about one sort of protocol, as attributes of
one object: its protocol schema, the runner that collects its raw data, the evaluator
that turns raw data into tests and a verdict, the typed detail records its rows carry,
the planner that states what a run could detect, its capabilities (what a run of it may
do: ledger, resume, shard, sequential, base ref) and the section of the pull-request
report it belongs to. The CLI, the API, the runner, `verify` and the report look a kind
up here; nothing else compares kind names.

Adding a kind: a package ``specconform/kinds/<kind>/`` (``Schema``, ``evaluate``), its
detail records in ``specconform/details/`` and their line in ``details.TYPED_KINDS`` (the
one place a kind's records are stated; a plug-in kind calls ``details.register_records``),
a runner module (``collect``), and one line in :data:`KINDS`.

Layering: this table sits in the kinds layer, below the runner and the planner. What
lives above it (the collector, which imports torch; the planner) is named by a
:class:`Ref` ("module:attribute") and imported only by the layer that calls it, so
importing the table never imports torch or an engine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specconform.details import SCHEMA1_RECORDS, records_of
from specconform.details.base import Record
from specconform.kinds import (
    distribution,
    equality,
    mcnemar,
    montecarlo,
    performance,
    quadrature,
    sequence,
    tree,
)
from specconform.kinds.distribution import legacy
from specconform.results import Evaluation, RawData

# What a kind's runner drives, which fixes its collector's signature (runner.collect):
# "sampler": collect(model, kernel, progress), a sampler adapter's accept function;
# "engine": collect(loaded, mutant=, progress=, log=, context=), an engine adapter;
# "source": collect(loaded, progress=, log=, context=), source trees or configurations
# (no planted bug can be selected).
Drives = Literal["sampler", "engine", "source"]

# The pull-request report's section for a kind (report.pr): "kernel" rows of the
# functional table (a grid kind states its worst error/bound, a sampled one its smallest
# adjusted p), "equality" rows, the "distribution" section, the "performance" section;
# "generic" a section of its own titled by `Kind.report_title`.
Section = Literal[
    "kernel-grid", "kernel-sampled", "greedy-equality", "replications", "throughput", "generic"
]


@dataclass(frozen=True)
class Ref:
    """A callable named, not imported: ``module:attribute``, loaded on first use by the
    layer that calls it (the runner's collectors import torch)."""

    target: str

    def load(self) -> Callable[..., Any]:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Capabilities:
    """What a run of the kind may do; the run assembly refuses the rest (exit 2)."""

    drives: Drives
    ledgered: bool = False  # draws seeds from a plan; ranges recorded in the seed ledger
    reserves_in_runner: bool = False  # reserves its seeds once its inputs are checked
    resumable: bool = False  # checkpoint folder, run lock, --resume
    shardable: bool = False  # --nproc / torchrun
    sequential: bool = False  # --sequential: batches until the e-process decides
    base_ref: bool = False  # --base-ref: compares this tree with a git base
    plan_command: bool = False  # `specconform plan` applies
    preflight_model: bool = False  # seed domain and model facts checked before any work
    mutant_layers: tuple[str, ...] = ()  # planted-bug layers `specconform mutants` lists


# (group name, first seed, stop) for every group a run reserves in the ledger.
SeedRanges = Callable[[Any], list[tuple[str, int, int]]]


@dataclass(frozen=True)
class Kind:
    name: str
    schema: type  # the pydantic model of its protocol files
    collect: Ref  # the runner's collect(...) -> raw files (signature: capabilities.drives)
    evaluate: Callable[[dict, RawData], Evaluation]
    capabilities: Capabilities
    report_section: Section
    report_title: str | None = None  # a generic section's title (default: the kind's name)
    report_first: bool = False  # the generic section that opens the others (quality)
    seed_ranges: SeedRanges | None = None  # for the ledger (capabilities.ledgered)
    plan: Ref | None = None  # (loaded, raw, evaluation) -> results/plan.json bytes or None
    # (protocol JSON) -> the deciding tests its seeds cannot give evidence, whatever the
    # laws (planning.evidence); checked by `run`/`gate` before any model loads
    evidence_plan: Ref | None = None
    schema1_evaluate: Callable[[dict, RawData], Evaluation] | None = None

    # A kind's detail records are stated once, in the details layer (details.TYPED_KINDS,
    # details.register_records for a plug-in kind): archives are read, and their rows
    # typed, below the kinds layer, without importing any evaluator. The table reads them.
    @property
    def records(self) -> tuple[type[Record], ...]:
        """The typed details its rows carry, most specific first (none: JsonDetail)."""
        return records_of(self.name)

    @property
    def schema1_records(self) -> tuple[type[Record], ...]:
        """The records of its archives before family-wise verdicts (the frozen shapes)."""
        return SCHEMA1_RECORDS.get(self.name, ())

    def evaluate_protocol(self, protocol: dict, raw: RawData) -> Evaluation:
        """Tests and verdict from a protocol (JSON data) and raw files; an archive of the
        first results schema (no ``verdict`` entry) through the frozen evaluator."""
        if self.schema1_evaluate is not None and is_schema1(protocol):
            return self.schema1_evaluate(protocol, raw)
        return self.evaluate(protocol, raw)


def is_schema1(protocol: Mapping) -> bool:
    """Whether a protocol predates family-wise verdicts (no ``verdict`` entry)."""
    return "verdict" not in protocol


def _runner(kind: str) -> Ref:
    return Ref(f"specconform.runner.{kind}:collect")


_SAMPLER = Capabilities(drives="sampler", mutant_layers=("kernel",))
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("quadrature", quadrature.Schema, _runner("quadrature"), quadrature.evaluate,
             _SAMPLER, "kernel-grid"),
        Kind("montecarlo", montecarlo.Schema, _runner("montecarlo"), montecarlo.evaluate,
             _SAMPLER, "kernel-sampled"),
        Kind("distribution", distribution.Schema, _runner("distribution"), distribution.evaluate,
             Capabilities(drives="engine", ledgered=True, resumable=True, shardable=True,
                          sequential=True, plan_command=True, preflight_model=True,
                          mutant_layers=("kernel", "engine")),
             "replications", seed_ranges=distribution.seed_ranges,
             plan=Ref("specconform.planning.run:plan_bytes"),
             evidence_plan=Ref("specconform.planning.evidence:distribution_shortfalls"),
             schema1_evaluate=legacy.evaluate),
        Kind("equality", equality.Schema, _runner("equality"), equality.evaluate,
             Capabilities(drives="source", base_ref=True), "greedy-equality"),
        Kind("performance", performance.Schema, _runner("performance"), performance.evaluate,
             Capabilities(drives="source", base_ref=True), "throughput"),
        Kind("sequence", sequence.Schema, _runner("sequence"), sequence.evaluate,
             Capabilities(drives="engine", ledgered=True, reserves_in_runner=True),
             "generic", seed_ranges=sequence.seed_ranges),
        Kind("mcnemar", mcnemar.Schema, _runner("mcnemar"), mcnemar.evaluate,
             Capabilities(drives="engine", ledgered=True, reserves_in_runner=True),
             "generic", report_title="Quality (paired correctness, McNemar)",
             report_first=True, seed_ranges=mcnemar.seed_ranges,
             plan=Ref("specconform.kinds.mcnemar.plan:plan_bytes")),
        Kind("tree", tree.Schema, _runner("tree"), tree.evaluate,
             Capabilities(drives="engine", mutant_layers=("tree",)), "generic",
             report_title="Tree speculation (exact law, TV of lossy settings)"),
    )
}  # fmt: skip


def kind_of(name: object) -> Kind:
    """The kind named ``name``; ValueError naming the known ones otherwise."""
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ValueError(f"unknown protocol kind {name!r}; known: {sorted(KINDS)}")
    return kind


def kinds_with(predicate: Callable[[Capabilities], bool]) -> list[str]:
    """Names of the kinds whose capabilities satisfy ``predicate``, in table order (for
    messages such as "--ledger applies to distribution, sequence and mcnemar")."""
    return [k.name for k in KINDS.values() if predicate(k.capabilities)]
