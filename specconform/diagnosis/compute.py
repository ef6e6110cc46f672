"""Diagnoses of an evaluation's failing rows, from its detail records and raw files.

Which rows: every deciding row that did not pass (FAIL, no evidence, inconclusive: any
status but PASS and INFO) and every non-deciding row that failed at its own level.
What each gets is chosen by the row's typed detail record (not by kind name: the kind
table is the only place kinds are named), so every kind whose records carry strata,
offenders or divergences is diagnosed the same way:

- χ² records (strata of GofStratum / HomogeneityStratum / RejectionStratum, t1's
  per-group table): the stratum with the largest statistic and its top cells;
- out of support (distribution): the first offending (request, seed, position, token)
  with p and q, from raw/samples.csv and raw/reference.json;
- equality: the first diverging prompt and both token streams from there, from
  raw/outputs.json; sequence out of support: the first (request, step) per group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

from specconform.details.distribution import (
    AcceptanceDetail,
    EngineErrorsDetail,
    GroupsGofDetail,
    ScoreDetail,
    StratifiedDetail,
    SupportDetail,
)
from specconform.details.runs import EqualityDetail
from specconform.details.sequence import CheckDetail, SequenceSupportDetail
from specconform.results import INFO, PASS, Evaluation, RawData, TestRow
from specconform.util.errors import EvidenceError

from .cells import worst_stratum
from .model import STREAM_TOKENS, Diagnosis, Divergence

# Which generated token a distribution test's cells are, by the protocol's test type.
POSITIONS = {
    "t1_gof": "token index 0 (t1, not speculative)",
    "t2_gof": "token index 1 (t2 | t1: first draft position, round 1)",
    "t2_homogeneity": "token index 1 (t2 | t1: first draft position, round 1)",
    "t3_gof": "token index 2 (t3 | t1, t2: second draft position or bonus, round 1)",
    "joint": "token index 1, first draft position of round 1: accept/reject cells of t2 | t1",
    "joint_score": "token index 1, first draft position of round 1: accept/reject cells | t1",
    "acceptance": "token index 1, first draft position of round 1: its rejection | t1",
}


def needs_diagnosis(row: TestRow) -> bool:
    if row.status in (PASS, INFO):
        return False
    return row.deciding or row.passed is False


class _Inputs:
    """The archive's protocol and raw files, parsed at most once and only if needed."""

    def __init__(self, protocol: Mapping, raw: RawData):
        self.protocol = protocol
        self.raw = raw

    @cached_property
    def context(self):
        from specconform.kinds.distribution.context import SeedView
        from specconform.stats.reference import Reference

        ref = Reference(self.raw.json("raw/reference.json"))
        return SeedView.build(dict(self.protocol), self.raw.csv("raw/samples.csv"), ref)

    def has(self, *names: str) -> bool:
        return all(self.raw.has(n) for n in names)

    def spec(self, test: str) -> Mapping:
        for t in self.protocol.get("tests") or ():
            if isinstance(t, Mapping) and t.get("name") == test:
                return t
        return {}

    def configuration(self, groups: Sequence[str]) -> str:
        """Each named group's mode, draft depth and seeds, then the engine's sampling."""
        by_name = {
            g.get("name"): g for g in self.protocol.get("groups") or () if isinstance(g, Mapping)
        }
        seeds = self.protocol.get("seeds") or {}
        parts = []
        for name in groups:
            g = by_name.get(name)
            if g is None:
                parts.append(str(name))
                continue
            start = int(seeds.get("offset", 0)) + int(g.get("seed_offset", 0))
            depth = f" draft_loops={g['draft_loops']}" if g.get("draft_loops") is not None else ""
            count = seeds.get("count")
            span = f" seeds {start}..{start + int(count) - 1}" if count else ""
            parts.append(f"{name} (mode={g.get('mode')}{depth}{span})")
        engine = self.protocol.get("engine") or {}
        sampling = " ".join(
            f"{k}={engine[k]}"
            for k in ("num_speculative_tokens", "temperature", "top_k", "top_p", "max_tokens")
            if k in engine
        )
        return "; ".join(p for p in (", ".join(parts), sampling) if p)


def diagnose(
    protocol: Mapping, evaluation: Evaluation, raw: RawData, decode: Callable[[object], str] = str
) -> tuple[Diagnosis, ...]:
    """A diagnosis per row that needs one, deciding rows first, in table order."""
    inputs = _Inputs(protocol, raw)
    rows = [r for r in evaluation.tests if needs_diagnosis(r)]
    rows.sort(key=lambda r: not r.deciding)
    return tuple(_diagnose_row(r, inputs, decode) for r in rows)


def _diagnose_row(row: TestRow, inputs: _Inputs, decode) -> Diagnosis:
    spec = inputs.spec(row.test)
    d = row.detail
    groups = list(spec.get("groups") or ())
    base = Diagnosis(row.test, row.status, row.reason, inputs.configuration(groups))
    position = POSITIONS.get(str(spec.get("type")), "")
    if isinstance(d, SupportDetail) and inputs.has("raw/samples.csv", "raw/reference.json"):
        from .support import first_offenders

        where = ", ".join(
            f"{g}: t1 {c.t1} t2 {c.t2} t3 {c.t3}"
            for g, c in d.per_group.items()
            if c.t1 + c.t2 + c.t3
        )
        try:
            ctx = inputs.context
        except EvidenceError as exc:  # samples.csv too large to read whole (issue 38)
            return _with(base, note=f"per group and position: {where}; offenders not listed: {exc}")
        q_t3 = inputs.raw.json("raw/reference.json").get("q_t3_offenders")
        offenders, total = first_offenders(ctx.data, ctx.plans, ctx.ref, decode, q_t3=q_t3)
        return _with(
            base,
            offenders=offenders,
            offender_count=total,
            configuration=inputs.configuration(sorted({o.group for o in offenders})),
            note=f"per group and position: {where}" if where else "",
        )
    if isinstance(d, EngineErrorsDetail) and inputs.has("raw/samples.csv", "raw/reference.json"):
        from .support import first_errors

        try:
            data = inputs.context.data
        except EvidenceError as exc:  # samples.csv too large to read whole (issue 38)
            return _with(base, note=f"{d.rule}; first errors not listed: {exc}")
        return _with(base, note="; ".join(first_errors(data)) or d.rule)
    if isinstance(d, EqualityDetail):
        return _with(base, divergences=_divergences(d, inputs), note=d.first or "")
    if isinstance(d, SequenceSupportDetail):
        firsts = ", ".join(f"{g}: request {o.request} step {o.step}" for g, o in d.first.items())
        return _with(base, note=f"first offender per group: {firsts}" if firsts else d.rule)
    if isinstance(d, StratifiedDetail | AcceptanceDetail):
        return _with(base, stratum=worst_stratum(d.strata, position, decode), note=_no_evidence(d))
    if isinstance(d, GroupsGofDetail):
        note = f"smallest p: group {d.smallest_p_group}" if d.smallest_p_group else _no_evidence(d)
        return _with(base, stratum=worst_stratum(d.per_group, position, decode), note=note)
    if isinstance(d, ScoreDetail):
        scores = ", ".join(
            f"{name} {s:+.3g}"
            for name, s in zip(d.directions, d.score, strict=False)
            if s is not None
        )
        return _with(base, note=f"{position}; score per bug-class direction: {scores}")
    strata = getattr(d, "strata", None)
    if isinstance(strata, tuple) and strata and hasattr(strata[0], "observed"):
        return _with(base, stratum=worst_stratum(strata, position, decode))
    if isinstance(d, CheckDetail) and d.examples:  # a deterministic check's first mismatch
        first = json.dumps(d.examples[0], sort_keys=True)
        first = first if len(first) <= 200 else first[:197] + "..."
        return _with(base, note=f"{d.mismatches} of {d.checked} mismatched; first: {first}")
    return _with(base, note=_no_evidence(d))


def _with(base: Diagnosis, **changes) -> Diagnosis:
    from dataclasses import replace

    return replace(base, **changes)


def _no_evidence(detail) -> str:
    why = getattr(detail, "no_evidence", None)
    return f"no evidence: {why}" if why else ""


def _divergences(d: EqualityDetail, inputs: _Inputs) -> tuple[Divergence, ...]:
    """The first divergence with both token streams from its position (raw/outputs.json)."""
    if not d.divergences:
        return ()
    first = d.divergences[0]
    engine: tuple[int, ...] = ()
    reference: tuple[int, ...] = ()
    if inputs.has("raw/outputs.json"):
        outputs = inputs.raw.json("raw/outputs.json").get("outputs", {})
        streams = []
        for side_config in (d.candidate, d.base):
            side, _, config = side_config.partition("/")
            seqs = outputs.get(side, {}).get(config, [])
            seq = seqs[first.prompt] if first.prompt < len(seqs) else []
            streams.append(
                tuple(int(t) for t in seq[first.position : first.position + STREAM_TOKENS])
            )
        engine, reference = streams
    gaps = f"top-2 gap base {first.gap_base}, candidate {first.gap_candidate}"
    note = ("near tie; " if first.near_tie else "") + gaps
    return (Divergence(f"prompt {first.prompt}", None, first.position, engine, reference, note),)
