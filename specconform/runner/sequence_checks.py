"""The deterministic checks of a sequence run (raw/sequence/checks.json).

Each check compares two things that a correct engine makes equal, so it has no sample
size and no p-value: a mismatch is a failure. Records follow
`specconform.kinds.sequence.raw` (type, applicable, why, checked, mismatches,
max_abs_diff, tolerance, examples). The comparison logic here takes laws through plain
callables, so tests drive it with synthetic traces and references.

A law comparison (oracle, teacher_forcing, trace) is a mismatch when the two laws'
supports differ (a token of positive mass in one and zero in the other) or when
max |Δp| exceeds the test's tolerance (stated, or ``tolerance: model``: the law bound
of the protocol's numerics model). With a numerics block, a token comparison's
divergence inside the model's error is a near-tie, counted apart (runner/near_ties.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.kinds.sequence.numerics import (
    TOKEN_TYPES,
    check_model,
    check_tolerance,
    counts_near_ties,
    model_json,
)
from specconform.runner.filter_ties import FilterParams, classify_support
from specconform.runner.near_ties import Divergence
from specconform.stats.oracle import SamplingSemantics, compare_laws, oracle_law

MAX_EXAMPLES = 5
# Default sizes when a test gives no `sample` (prefixes for oracle/teacher_forcing,
# requests for trace/isolation); docs/sequence-runner.md.
DEFAULT_SAMPLE = {"oracle": 64, "teacher_forcing": 64, "trace": 4, "isolation": 4}
# Default max |Δp| when a test gives no tolerance: float32 reductions in another order
# differ by a few ulps of the largest probability; docs/sequence-runner.md has the
# measured differences.
DEFAULT_TOLERANCE = {"oracle": 1e-6, "teacher_forcing": 1e-5, "trace": 1e-5}

LawFn = Callable[[Sequence[int], RequestSpec], np.ndarray]
DraftLawFn = Callable[[Sequence[int], RequestSpec, int], np.ndarray | None]


@dataclass
class CheckTally:
    """Counts of one check as it runs; `record()` is its checks.json entry."""

    type: str
    tolerance: float | None
    checked: int = 0
    mismatches: int = 0
    max_abs_diff: float | None = None
    examples: list[dict] = field(default_factory=list)
    support_differences: int = 0  # law comparisons whose supports differ (not in record())
    # The protocol's numerics model as checks.json records it (kinds/sequence/numerics.py
    # model_json); None: no numerics block. near_ties is not None for token comparisons
    # held to the model (runner/near_ties.py): mismatches inside its error.
    numerics: dict | None = None
    near_ties: int | None = None
    decisions: int = 0
    near_tie_examples: list[dict] = field(default_factory=list)

    def add(self, ok: bool, example: dict, diff: float | None = None) -> None:
        self.checked += 1
        if diff is not None:
            self.max_abs_diff = diff if self.max_abs_diff is None else max(self.max_abs_diff, diff)
        if not ok:
            self.mismatches += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(example)

    def add_laws(
        self, a: np.ndarray, b: np.ndarray, example: dict, filters: FilterParams | None = None
    ) -> bool:
        """Compare two [V] laws (a: the reference's); returns whether they agree. With
        the request's ``filters`` and a law check that counts near-ties, a support
        difference at a top-k/top-p threshold inside the model's error is a near-tie
        (runner/filter_ties.py): counted apart, never a mismatch."""
        c = compare_laws(a, b)
        tol = self.tolerance if self.tolerance is not None else 0.0
        ok = c.same_support and c.max_abs_diff <= tol
        self.support_differences += int(not c.same_support)
        detail = {
            **example,
            "same_support": c.same_support,
            "max_abs_diff": c.max_abs_diff,
            "support": [c.support_reference, c.support_oracle],
        }
        counted = filters is not None and filters.active and self._counts_filter_ties()
        if counted:
            self.decisions += 1
        if counted and not c.same_support:
            assert filters is not None and self.numerics is not None
            tie = classify_support(
                a,
                b,
                filters,
                logit_bound=self.numerics["logit_bound"],
                law_bound=self.numerics["law_bound"],
                tolerance=tol,
            )
            detail.update(tie.to_json())
            if tie.near_tie:
                self.checked += 1
                self.near_ties = (self.near_ties or 0) + 1
                self.max_abs_diff = max(self.max_abs_diff or 0.0, tie.common_diff)
                if len(self.near_tie_examples) < MAX_EXAMPLES:
                    self.near_tie_examples.append(detail)
                return True
            detail["outside_error"] = tie.why
        self.add(ok, detail, c.max_abs_diff)
        return ok

    def _counts_filter_ties(self) -> bool:
        return (
            self.near_ties is not None
            and self.numerics is not None
            and (self.type not in TOKEN_TYPES)
        )

    def add_divergence(self, div: Divergence, example: dict) -> None:
        """One token comparison held to the numerics model: equal, a near-tie (counted
        apart, never a mismatch), or a mismatch (outside the error, or unclassifiable)."""
        self.decisions += div.compared
        if div.step is None:
            self.add(True, example)
            return
        detail = {**example, **(div.decision.to_json() if div.decision else {})}
        if div.why:
            detail["unclassified"] = div.why
        if div.near_tie:
            self.checked += 1
            self.near_ties = (self.near_ties or 0) + 1
            if len(self.near_tie_examples) < MAX_EXAMPLES:
                self.near_tie_examples.append(detail)
        else:
            self.add(False, detail)

    def record(self) -> dict:
        out = {
            "type": self.type,
            "applicable": True,
            "why": "",
            "checked": self.checked,
            "mismatches": self.mismatches,
            "max_abs_diff": self.max_abs_diff,
            "tolerance": self.tolerance,
            "examples": self.examples,
        }
        if self.numerics is not None:
            out["numerics"] = self.numerics
        if self.near_ties is not None:
            out["near_ties"] = self.near_ties
            out["decisions"] = self.decisions
            out["near_tie_examples"] = self.near_tie_examples
        return out


def not_applicable(type_: str, why: str, tolerance: float | None = None) -> dict:
    return {
        "type": type_,
        "applicable": False,
        "why": why,
        "checked": 0,
        "mismatches": 0,
        "max_abs_diff": None,
        "tolerance": tolerance,
        "examples": [],
    }


def sample_of(test, n: int, pit_seed: int) -> list[int]:
    """A pre-registered deterministic sample of `test.sample` (or the type's default)
    indices out of range(n), sorted: drawn without replacement from a generator keyed
    by the protocol's pit_seed and the test's name (both in the protocol's hash)."""
    size = min(n, test.sample or DEFAULT_SAMPLE.get(test.type, 1))
    rng = np.random.default_rng([int(pit_seed), zlib.crc32(test.name.encode())])
    return sorted(int(i) for i in rng.choice(n, size=size, replace=False)) if size else []


def spread(n: int, k: int) -> list[int]:
    """k request indices spread evenly over range(n) (first and last included)."""
    k = min(n, k)
    return sorted({int(round(x)) for x in np.linspace(0, n - 1, k)}) if k else []


def tolerance_of(test, protocol: dict | None = None) -> float | None:
    """The test's max |Δp|: stated, derived from the numerics model (``tolerance:
    model``; ``protocol``: the canonical JSON), or the type's default."""
    if test.tolerance == "model":
        return check_tolerance(protocol or {}, test.model_dump(mode="json"))
    return test.tolerance if test.tolerance is not None else DEFAULT_TOLERANCE.get(test.type)


def new_tally(test, protocol: dict) -> CheckTally:
    """A test's tally; with the protocol's numerics block it records the model, and the
    token comparisons (isolation, greedy_equality) count near-ties."""
    tally = CheckTally(test.type, tolerance_of(test, protocol))
    spec = test.model_dump(mode="json")
    model = check_model(protocol, spec)
    if model is not None and (test.tolerance == "model" or test.type in TOKEN_TYPES):
        tally.numerics = model_json(model)
        if counts_near_ties(spec):
            tally.near_ties = 0
    return tally


# --- oracle ---------------------------------------------------------------------------


def semantics(req: RequestSpec) -> SamplingSemantics:
    return SamplingSemantics(req.temperature, req.top_k, req.top_p)


def oracle_check(
    tally: CheckTally,
    prefixes: Sequence[tuple[dict, Sequence[int], RequestSpec]],
    configs: Sequence[tuple[float, int, float]],
    target_law_for: LawFn,
    target_logits: Callable[[Sequence[int]], np.ndarray],
) -> CheckTally:
    """Each sampled prefix under every distinct (temperature, top_k, top_p) of the
    protocol: the reference law against the oracle applied to the same logits."""
    for where, prefix, req in prefixes:
        logits = target_logits(prefix)
        for t, k, p in configs:
            r = replace(req, temperature=t, top_k=k, top_p=p)
            tally.add_laws(
                target_law_for(prefix, r),
                oracle_law(logits, semantics(r)),
                {**where, "temperature": t, "top_k": k, "top_p": p},
            )
    return tally


# --- trace ----------------------------------------------------------------------------


def filters_of(
    req: RequestSpec, law_for: Callable[[RequestSpec], np.ndarray]
) -> FilterParams | None:
    """The request's filters for a law comparison, with the reference's unfiltered law
    (``law_for`` of the request without top-k/top-p) as a thunk; None for greedy."""
    if req.greedy:
        return None
    bare = replace(req, top_k=0, top_p=1.0)
    return FilterParams(int(req.top_k), float(req.top_p), lambda: law_for(bare))


def compare_step(
    tally: CheckTally,
    req: RequestSpec,
    prefix: list[int],
    at: dict,
    p_engine: np.ndarray,
    q_engine: np.ndarray | None,
    target_law_for: LawFn,
    draft_law_for: DraftLawFn,
    draft_depth: int | None,
) -> None:
    """One step of a law check: the engine's p ([V]) against the serial reference's at
    ``prefix``, and its q when given (and the reference has one), each with the
    request's filters (a support difference at a threshold may be a near-tie)."""

    def target_at(r: RequestSpec) -> np.ndarray:
        return target_law_for(prefix, r)

    tally.add_laws(target_at(req), p_engine, {**at, "law": "p"}, filters_of(req, target_at))
    if q_engine is None or draft_depth is None:
        return
    depth = draft_depth  # narrowed to int for the closure below

    def draft_at(r: RequestSpec) -> np.ndarray:
        q = draft_law_for(prefix, r, depth)
        # The unfiltered draft law exists whenever the filtered one does (same model).
        assert q is not None, "draft law missing for the unfiltered request"
        return q

    q = draft_law_for(prefix, req, depth)
    if q is not None:
        tally.add_laws(q, q_engine, {**at, "law": "q"}, filters_of(req, draft_at))


def trace_check(
    tally: CheckTally,
    requests: Sequence[RequestSpec],
    records: Sequence[SequenceRecord],
    where: Sequence[dict],
    draft_depth: int,
    target_law_for: LawFn,
    draft_law_for: DraftLawFn,
) -> CheckTally:
    """Every round of every traced request: p at positions 0..L and q at 0..L-1 that
    the engine used, against the serial replay at prompt + tokens[:prefix_len] +
    drafts[:j]."""
    for req, rec, w in zip(requests, records, where, strict=True):
        for tr in rec.traces or ():
            base = list(req.prompt) + list(rec.tokens[: tr.prefix_len])
            for j in range(len(tr.drafts) + 1):
                prefix = base + list(tr.drafts[:j])
                at = {**w, "round": tr.round, "position": j}
                q_engine = tr.q[j] if j < len(tr.drafts) else None
                compare_step(
                    tally, req, prefix, at, tr.p[j], q_engine, target_law_for, draft_law_for,
                    draft_depth,
                )  # fmt: skip
    return tally


# --- token equality (isolation, greedy_equality) --------------------------------------


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first step where two token lists differ (a length difference counts at the
    shorter one's end), None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def add_token_comparison(tally: CheckTally, a: Sequence[int], b: Sequence[int], where: dict):
    d = first_divergence(a, b)
    example = {**where, "first_divergent_step": d}
    if d is not None:
        example["tokens"] = [
            int(a[d]) if d < len(a) else None,
            int(b[d]) if d < len(b) else None,
        ]
    tally.add(d is None, example)


def greedy_pairs(
    tested: Sequence[RequestSpec], against: Sequence[RequestSpec]
) -> list[tuple[int, int | None]]:
    """(i, j) for each greedy request i of the tested group: j is the first greedy
    request of the `against` group with the same prompt, max_tokens, stop tokens and
    EOS rule (a greedy generation is a function of those alone, so one partner may
    serve several requests); None when there is none."""
    pairs: list[tuple[int, int | None]] = []
    for i, r in enumerate(tested):
        if not r.greedy:
            continue
        key = (r.prompt, r.max_tokens, r.stop_token_ids, r.ignore_eos)
        match = next(
            (
                j
                for j, s in enumerate(against)
                if s.greedy and (s.prompt, s.max_tokens, s.stop_token_ids, s.ignore_eos) == key
            ),
            None,
        )
        pairs.append((i, match))
    return pairs
