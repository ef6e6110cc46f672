"""Equality evaluation (torch-free): first divergences from the raw greedy outputs.

Raw data, ``raw/outputs.json`` (written by specconform.runner.equality)::

    {"prompts": [[int, ...], ...],
     "sides": {"candidate": {...provenance...}, "base": {...}},   # base: with --base-ref
     "outputs": {"candidate": {"<config>": [[int, ...], ...]}, "base": {...}},
     "gaps": {"<comparison>/<prompt>": {"base": [top1, top2, gap], "candidate": [...]}}}

A comparison's row counts the prompts whose token sequences differ (a sequence that
stops early differs at its end). Each divergence is named: prompt, position, both
tokens, and the top-2 log-probability gap of the full-depth law at that prefix on each
side (measured by the runner), so a bf16 near-tie (gap below ``near_tie_gap``) is told
apart from a real change; ``near_ties: allow`` lets near-ties pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specconform.details.runs import DivergenceRecord, EqualityDetail
from specconform.kinds.verdict import FamilyRule, family_verdict
from specconform.results import FAIL, PASS, Evaluation, RawData, TestRow

RAW_FILE = "raw/outputs.json"
STATISTIC = "number of prompts whose greedy token sequences differ"


@dataclass(frozen=True)
class ComparisonSpec:
    """One pair to compare: which side and configuration is base, which candidate."""

    name: str
    role: str
    base: tuple[str, str]  # (side, configuration)
    candidate: tuple[str, str]


@dataclass(frozen=True)
class Divergence:
    """The first position where two greedy sequences of one prompt differ."""

    prompt: int
    position: int  # index into the generated tokens
    base_token: int | None  # None: that sequence ended here
    candidate_token: int | None
    base_length: int
    candidate_length: int
    gap_base: float | None = None  # log p1 - log p2 at the prefix, base side
    gap_candidate: float | None = None
    near_tie: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def comparisons(protocol: dict, sides: list[str]) -> list[ComparisonSpec]:
    """Declared within-tree comparisons (on the candidate), and with a base side every
    configuration of the candidate against the base's same configuration."""
    out = [
        ComparisonSpec(
            c["name"], c["role"], ("candidate", c["base"]), ("candidate", c["candidate"])
        )
        for c in protocol["comparisons"]
    ]
    if "base" in sides:
        out += [
            ComparisonSpec(
                f"base_vs_candidate_{c['name']}",
                "primary",
                ("base", c["name"]),
                ("candidate", c["name"]),
            )
            for c in protocol["configurations"]
        ]
    return out


def first_divergence(prompt: int, base: list[int], candidate: list[int]) -> Divergence | None:
    for i, (a, b) in enumerate(zip(base, candidate, strict=False)):
        if a != b:
            return Divergence(prompt, i, a, b, len(base), len(candidate))
    if len(base) != len(candidate):
        i = min(len(base), len(candidate))
        return Divergence(
            prompt,
            i,
            base[i] if i < len(base) else None,
            candidate[i] if i < len(candidate) else None,
            len(base),
            len(candidate),
        )
    return None


def gap_key(comparison: str, prompt: int) -> str:
    return f"{comparison}/{prompt}"


def _gap(entry: dict | None, side: str) -> float | None:
    if not entry or side not in entry:
        return None
    return float(entry[side][2])


def evaluate_comparison(protocol: dict, spec: ComparisonSpec, raw: dict) -> TestRow:
    outputs = raw["outputs"]
    try:
        base = outputs[spec.base[0]][spec.base[1]]
        cand = outputs[spec.candidate[0]][spec.candidate[1]]
    except KeyError as exc:
        raise ValueError(f"{RAW_FILE} has no outputs for {exc.args[0]!r}") from None
    n_prompts = len(raw["prompts"])
    if len(base) != n_prompts or len(cand) != n_prompts:
        raise ValueError(
            f"comparison {spec.name}: {len(base)} and {len(cand)} outputs for {n_prompts} prompts"
        )
    tie_gap = float(protocol["near_tie_gap"])
    divergences = []
    for i, (a, b) in enumerate(zip(base, cand, strict=True)):
        d = first_divergence(i, list(a), list(b))
        if d is None:
            continue
        entry = raw.get("gaps", {}).get(gap_key(spec.name, i))
        gb, gc = _gap(entry, "base"), _gap(entry, "candidate")
        near = any(g is not None and g < tie_gap for g in (gb, gc))
        divergences.append(
            Divergence(**{**asdict(d), "gap_base": gb, "gap_candidate": gc, "near_tie": near})
        )
    counted = [d for d in divergences if not (d.near_tie and protocol["near_ties"] == "allow")]
    passed = not counted
    tokens = sum(max(len(a), len(b)) for a, b in zip(base, cand, strict=True))
    first = divergences[0] if divergences else None
    detail = EqualityDetail(
        statistic=STATISTIC,
        base="/".join(spec.base),
        candidate="/".join(spec.candidate),
        prompts=n_prompts,
        tokens_compared=tokens,
        divergences=tuple(DivergenceRecord(**asdict(d)) for d in divergences),
        near_ties=sum(d.near_tie for d in divergences),
        near_tie_gap=tie_gap,
        near_ties_rule=protocol["near_ties"],
        first=None
        if first is None
        else (
            f"prompt {first.prompt} position {first.position}: base {first.base_token} vs "
            f"candidate {first.candidate_token} (top-2 gap base {_fmt(first.gap_base)}, "
            f"candidate {_fmt(first.gap_candidate)})"
        ),
    )
    reason = (
        "" if passed else (f"{len(counted)} of {n_prompts} prompts diverge; first: {detail.first}")
    )
    return TestRow(
        test=spec.name,
        role=spec.role,
        statistic=float(len(counted)),
        df=None,
        pvalue=None,
        n=n_prompts,
        alpha=0.0,
        passed=passed,
        status=PASS if passed else FAIL,
        detail=detail,
        reason=reason,
        pvalue_method="none (deterministic: token identity)",
    )


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    data = raw.json(RAW_FILE)
    specs = comparisons(protocol, sorted(data["outputs"]))
    if not specs:
        raise ValueError(
            "equality protocol has no comparison (declare `comparisons` or run with --base-ref)"
        )
    rows = [evaluate_comparison(protocol, s, data) for s in specs]
    decided, verdict = family_verdict(rows, FamilyRule(("primary",), "holm", 0.0))
    return Evaluation(decided, verdict)
