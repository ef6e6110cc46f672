"""The deterministic rows of a sequence protocol: the pre-registered checks of
raw/sequence/checks.json (oracle, teacher_forcing, trace, isolation, greedy_equality),
and the rows every sequence evaluation adds: out_of_support, engine_errors, coverage.

A deterministic check has no p-value: a correct engine never breaks it, so a failure
adds nothing to the verdict's false-fail rate. A check the adapter cannot run
("applicable": false) is NO_EVIDENCE with the reason "not applicable: <why>" -- never a
pass -- and a deciding one fails the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.details.distribution import CoverageRecord
from specconform.details.sequence import (
    CheckDetail,
    GroupTokens,
    Offender,
    SequenceCoverageDetail,
    SequenceEngineErrorsDetail,
    SequenceSupportDetail,
)
from specconform.kinds.verdict import (
    ENGINE_ERRORS_METHOD,
    REASON_ENGINE_ERRORS,
    SUPPORT_METHOD,
    coverage_info_row,
    deterministic_row,
)
from specconform.results import FAIL, INFO, NO_EVIDENCE, PASS, Decision, TestRow

from .context import Context
from .numerics import check_model, check_tolerance, model_json, numerics_block, tie_limit
from .strata import slot_label, slots

CHECK_METHOD = "none (deterministic: a correct engine never breaks it)"


def check_row(ctx: Context, spec: dict, checks: dict, protocol: dict | None = None) -> TestRow:
    """The row of one deterministic test from its checks.json record (ValueError when
    the record is missing or does not fit the test). With the protocol's numerics block
    the tolerance of ``tolerance: model`` and the near-tie limit are recomputed here
    from the protocol (kinds/sequence/numerics.py), never read from the record."""
    name = spec["name"]
    if name not in checks:
        raise ValueError(f"checks.json: no record for test {name!r}")
    rec = checks[name]
    if not isinstance(rec, dict) or rec.get("type") != spec["type"]:
        raise ValueError(f"checks.json: record {name!r} is not a {spec['type']} check")
    applicable = rec.get("applicable")
    checked, mismatches = int(rec.get("checked", 0)), int(rec.get("mismatches", 0))
    if not isinstance(applicable, bool) or checked < 0 or mismatches < 0 or mismatches > checked:
        raise ValueError(
            f"checks.json: record {name!r} has inconsistent applicable/checked/mismatches"
        )
    tolerance, max_diff = rec.get("tolerance"), rec.get("max_abs_diff")
    stated = spec.get("tolerance")
    if stated == "model":
        stated = check_tolerance(protocol or {}, spec)
    if stated is not None and tolerance != stated:
        raise ValueError(
            f"checks.json: record {name!r} used tolerance {tolerance!r}, the protocol {stated!r}"
        )
    ties = _near_ties(name, spec, rec, protocol or {}, checked) if applicable else None
    examples = list(rec.get("examples") or [])[:5]
    detail = CheckDetail(
        type=spec["type"],
        applicable=applicable,
        why=str(rec.get("why", "")),
        checked=checked,
        mismatches=mismatches,
        max_abs_diff=max_diff,
        tolerance=tolerance,
        examples=tuple(examples),
        rule="PASS iff applicable, something was checked and nothing mismatched"
        + (
            ""
            if ties is None
            else "; near-ties (inside the numerics model's error) are "
            "counted apart and FAIL only above the model's limit"
        ),
        numerics=rec.get("numerics"),
        **({} if ties is None else ties.fields()),
    )
    over = tolerance is not None and max_diff is not None and float(max_diff) > float(tolerance)
    if not applicable:
        decision = Decision(NO_EVIDENCE, False, f"not applicable: {rec.get('why', '')}")
    elif checked == 0:
        decision = Decision(NO_EVIDENCE, False, "no evidence: nothing checked")
    elif mismatches or over:
        first = examples[0] if examples else {}
        what = f"first mismatch {first}" if first else f"max |diff| {max_diff} > {tolerance}"
        reason = f"{mismatches} of {checked} mismatched; {what}"
        if ties is not None and ties.count:
            reason += f"; {ties.text()}"
        decision = Decision(FAIL, False, reason)
    elif ties is not None and ties.count > ties.limit:
        reason = f"{ties.text()}: more than the numerics model allows (model refuted)"
        decision = Decision(FAIL, False, reason)
    else:
        decision = Decision(PASS, True, ties.text() if ties is not None and ties.count else "")
    if spec["role"] == "exploratory" and decision.status in (PASS, FAIL):
        # reported, never decides; the reason (e.g. the mismatches) stays
        decision = Decision(INFO, None, decision.reason)
    statistic = float(mismatches) if applicable else None
    return TestRow.decided(
        name, spec["role"], statistic, checked, ctx.alpha, detail, CHECK_METHOD, decision
    )


@dataclass(frozen=True)
class NearTies:
    """A token comparison's near-ties against the limit the protocol's model allows."""

    count: int
    decisions: int
    limit: int
    alpha: float
    examples: tuple

    def fields(self) -> dict:
        return {
            "decisions": self.decisions,
            "near_ties": self.count,
            "near_tie_limit": self.limit,
            "near_tie_examples": self.examples,
        }

    def text(self) -> str:
        return (
            f"{self.count} near-tie(s) in {self.decisions} decisions "
            f"(limit {self.limit} at alpha {self.alpha:g})"
        )


def _near_ties(name: str, spec: dict, rec: dict, protocol: dict, checked: int) -> NearTies | None:
    """The record's near-tie counts (token comparisons under a numerics block), checked
    for consistency; None when the record has none (no numerics block, or a law check)."""
    if "near_ties" not in rec:
        return None
    block = numerics_block(protocol)
    count, decisions = rec.get("near_ties"), rec.get("decisions")
    if (
        block is None
        or not isinstance(count, int)
        or not isinstance(decisions, int)
        or not 0 <= count <= checked
        or decisions < count
    ):
        raise ValueError(f"checks.json: record {name!r} has inconsistent near-tie counts")
    model = check_model(protocol, spec)
    if model is None or rec.get("numerics") != model_json(model):
        raise ValueError(f"checks.json: record {name!r} used another numerics model")
    limit = tie_limit(protocol, spec, decisions)
    assert limit is not None  # a block exists
    examples = tuple(list(rec.get("near_tie_examples") or [])[:5])
    return NearTies(count, decisions, limit, float(block["alpha"]), examples)


def support_row(ctx: Context, deciding_groups: set[str], protocol: dict | None = None) -> TestRow:
    """Tokens of reference probability 0 (random or greedy requests), and, when the
    archive has the mechanism columns, drafted tokens of conditional probability 0 given
    the accept decision (specconform/stats/mechanism.py: beyond its rounding tolerance):
    one in a group a deciding test reads is fatal. Under the protocol's numerics block a
    zero-probability token whose filter decision lies inside the model's error
    (tokens.csv filter_margin <= 1: a top-k/top-p threshold or a greedy argmax that float
    rounding can move) is a near-tie instead: counted apart and bounded at numerics.alpha
    (its level is charged to the verdict's reserve, protocol/schema_sequence.py)."""
    tok = ctx.tokens
    block = numerics_block(protocol or {})
    deciding = np.isin(tok.group, [tok.groups.index(g) for g in deciding_groups])
    near = (tok.filter_margin <= 1.0) if block is not None else np.zeros(tok.group.size, bool)
    marginal = ~tok.in_support
    mech = (tok.mech_p == 0) & ~marginal  # NaN (empty, boundary, old archive) compares False
    per, first = _offenders(tok, marginal & ~near, deciding_groups)
    total = sum(per[g] for g in deciding_groups if g in per)
    ties = None
    if block is not None:
        ties = _support_ties(tok, (marginal | mech) & near & deciding, deciding, protocol or {})
    detail = SequenceSupportDetail(
        per_group=per,
        deciding_groups=tuple(sorted(deciding_groups)),
        first=first,
        rule="any committed token with reference probability 0 in a deciding group fails"
        + ("" if ties is None else "; near-ties (filter_margin <= 1) count apart, within a limit"),
        **({} if ties is None else ties.fields()),
    )
    reason = "out of support" if total else ""
    if tok.has_mech:
        mech_per, mech_first = _offenders(tok, mech & ~near, deciding_groups)
        mech_total = sum(mech_per[g] for g in deciding_groups if g in mech_per)
        detail = detail.replace(
            mechanism_per_group=mech_per,
            mechanism_first=mech_first,
            mechanism_rule="and any drafted token of probability 0 under its conditional law "
            "given the accept decision (a correction where q - p > 1e-4 q, an accepted draft "
            "where min(p, q) = 0)",
        )
        if mech_total and not total:
            reason = "mechanism out of support"
        total += mech_total
    n = int(tok.p_token.size)
    if total:
        decision = Decision(
            FAIL, False, reason + (f"; {ties.text()}" if ties and ties.count else "")
        )
    elif ties is not None and ties.count > ties.limit:
        decision = Decision(FAIL, False, f"{ties.text()}: more than the numerics model allows")
    else:  # near-ties within the limit: shown in the detail and the numerics section
        decision = Decision(PASS, True)
    return TestRow.decided(
        "out_of_support", "primary", float(total), n, ctx.alpha, detail, SUPPORT_METHOD, decision
    )


def _support_ties(tok, ties: np.ndarray, deciding: np.ndarray, protocol: dict) -> NearTies:
    """The near-ties of out_of_support against the limit over the deciding groups'
    tokens of filtered or greedy requests, at the model of their smallest temperature."""
    groups = sorted({tok.groups[int(g)] for g in np.unique(tok.group[deciding])})
    spec = {"name": "out_of_support", "type": "out_of_support", "groups": groups}
    decisions = int((deciding & tok.filtered).sum())
    limit = tie_limit(protocol, spec, decisions)
    assert limit is not None  # a block exists
    examples = tuple(
        {
            "group": tok.groups[int(tok.group[i])],
            "request": int(tok.request[i]),
            "step": int(tok.step[i]),
            "law": "marginal" if tok.p_token[i] == 0 else "mechanism",
            "filter_margin": float(tok.filter_margin[i]),
        }
        for i in np.flatnonzero(ties)[:5]
    )
    alpha = float(protocol["numerics"]["alpha"])
    return NearTies(int(ties.sum()), decisions, limit, alpha, examples)


def _offenders(
    tok, bad: np.ndarray, deciding_groups: set[str]
) -> tuple[dict[str, int], dict[str, Offender]]:
    """Offending tokens per group, and the first offender of each deciding group."""
    per = {g: int((bad & (tok.group == i)).sum()) for i, g in enumerate(tok.groups)}
    first = {}
    for g in sorted(deciding_groups):
        hits = np.flatnonzero(bad & (tok.group == tok.groups.index(g)))
        if hits.size:
            i = int(hits[0])
            first[g] = Offender(request=int(tok.request[i]), step=int(tok.step[i]))
    return per, first


def engine_errors_row(ctx: Context, deciding_groups: set[str]) -> TestRow:
    """Requests whose finish_reason is "error", per group, against the tolerance."""
    req = ctx.requests
    names = ctx.tokens.groups
    per = {g: int((req.error & (req.group == i)).sum()) for i, g in enumerate(names)}
    deciding = sorted(deciding_groups & set(per))
    over = [g for g in deciding if per[g] > ctx.error_tolerance]
    ok = not over
    detail = SequenceEngineErrorsDetail(
        per_group=per,
        deciding_groups=tuple(deciding),
        tolerance=ctx.error_tolerance,
        over_tolerance=tuple(over),
        rule="FAIL if a group read by a deciding test has more engine errors than the tolerance",
    )
    return deterministic_row(
        "engine_errors",
        float(sum(per.values())),
        int(req.group.size),
        ctx.alpha,
        ok,
        detail,
        ENGINE_ERRORS_METHOD,
        REASON_ENGINE_ERRORS,
    )


def coverage_row(ctx: Context, coverage: dict[str, CoverageRecord]) -> TestRow:
    """Tokens per group (random, greedy, out of support) and per slot; what each
    stochastic test covered. Descriptive, never decides."""
    tok = ctx.tokens
    slot = slots(tok)
    per_group = {}
    for i, g in enumerate(tok.groups):
        mine = tok.group == i
        random = mine & tok.random
        labels, counts = np.unique(slot[random], return_counts=True)
        per_group[g] = GroupTokens(
            tokens=int(mine.sum()),
            random=int(random.sum()),
            greedy=int((mine & tok.greedy).sum()),
            out_of_support=int((mine & ~tok.in_support).sum()),
            requests=int((ctx.requests.group == i).sum()),
            per_slot={slot_label(int(s)): int(c) for s, c in zip(labels, counts, strict=True)},
        )
    shares = [c.n_covered / c.n_eligible for c in coverage.values() if c.n_eligible]
    share = min(shares, default=1.0)
    detail = SequenceCoverageDetail(
        statistic="smallest share of eligible random tokens covered by the strata of "
        "any pit_uniformity test",
        per_group=per_group,
        tests=coverage,
    )
    return coverage_info_row(share, int(tok.p_token.size), ctx.alpha, detail)
