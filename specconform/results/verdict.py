"""The protocol's decision: :class:`Verdict` (PASS, FAIL or, schema 3, INCONCLUSIVE), the
:class:`Evaluation` it closes, the results schema an archive states, and the schema-1
rule :func:`decide`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .rows import FAIL, PASS, TestRow

# The verdict's third outcome (schema 3): no deciding test failed, but at least one had
# no evidence. Not a failure of the engine; `gate` counts it as one unless told otherwise.
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)
# The archive's results schema: 1 = before family-wise verdicts (no `status`, no
# `adjusted_pvalue`), 2 = family-wise verdicts, PASS/FAIL (a deciding test without
# evidence failed the verdict), 3 = this module: PASS/FAIL/INCONCLUSIVE, verdict.json
# lists the tests without evidence under `inconclusive`. Written into verdict.json as
# `schema`; `verify` reads each archive under the schema it states.
RESULTS_SCHEMA = 3


@dataclass(frozen=True)
class Verdict:
    """The protocol's decision. ``alpha`` is the family-wise false-fail rate the verdict
    holds (schema 2) or the per-test level (schema 1); ``statement`` says which, e.g.
    "false-fail rate <= 0.01 over 8 tests (Holm)"; ``reasons`` maps each failed test to
    why it failed ("p_Holm < alpha", "no evidence", "engine errors", ...).

    Schema 3: ``failed`` lists the deciding tests that failed with evidence (or broke a
    deterministic rule), ``inconclusive`` those without evidence; the verdict is FAIL if
    any failed, else INCONCLUSIVE if any had no evidence, else PASS. Schema 2 listed both
    under ``failed`` and said FAIL (:meth:`as_schema2`)."""

    verdict: str  # "PASS", "FAIL" or (schema 3) "INCONCLUSIVE"
    alpha: float
    rule: str
    failed: tuple[str, ...]
    combine: str = ""  # "holm" | "bonferroni" | "" (schema 1: each test at alpha)
    family_size: int = 0  # stochastic deciding tests the rate is taken over
    statement: str = ""
    reasons: tuple[tuple[str, str], ...] = ()
    schema: int = 1
    inconclusive: tuple[str, ...] = ()  # schema 3: deciding tests without evidence

    def to_json(self) -> dict[str, Any]:
        out = {
            "verdict": self.verdict,
            "alpha": self.alpha,
            "rule": self.rule,
            "failed": list(self.failed),
        }
        if self.schema >= 2:
            out.update(
                {
                    "combine": self.combine,
                    "family_size": self.family_size,
                    "statement": self.statement,
                    "reasons": dict(self.reasons),
                    "schema": self.schema,
                }
            )
        if self.schema >= 3:
            out["inconclusive"] = list(self.inconclusive)
        return out

    def as_schema2(self, order: tuple[str, ...]) -> Verdict:
        """This verdict as results schema 2 stated it (how `verify` reads an archive of
        schema 2): a test without evidence failed the verdict, and ``failed`` lists every
        not-passed deciding test in ``order`` (the deciding rows' order)."""
        if self.schema < 3:
            return self
        if not self.inconclusive:
            return replace(self, schema=2)
        bad = set(self.failed) | set(self.inconclusive)
        failed = tuple(t for t in order if t in bad)
        return replace(
            self, verdict=FAIL if failed else PASS, failed=failed, inconclusive=(), schema=2
        )

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Verdict:
        return cls(
            verdict=str(obj["verdict"]),
            alpha=float(obj["alpha"]),
            rule=str(obj.get("rule", "")),
            failed=tuple(obj.get("failed", ())),
            combine=str(obj.get("combine", "")),
            family_size=int(obj.get("family_size", 0)),
            statement=str(obj.get("statement", "")),
            reasons=tuple(sorted((obj.get("reasons") or {}).items())),
            schema=int(obj.get("schema", 1)),
            inconclusive=tuple(obj.get("inconclusive", ())),
        )


@dataclass(frozen=True)
class Evaluation:
    tests: tuple[TestRow, ...]
    verdict: Verdict


def decide(
    tests: list[TestRow] | tuple[TestRow, ...],
    alpha: float,
    deciding_roles: tuple[str, ...],
    rule: str,
) -> Verdict:
    """Schema-1 rule: PASS iff every test whose role is in `deciding_roles` passed, each
    at its own level (no family-wise statement). Kept for the toy kind of the evidence
    tests and for archives written before family-wise verdicts; protocol kinds use
    :func:`specconform.kinds.verdict.family_verdict`."""
    failed = tuple(t.test for t in tests if t.role in deciding_roles and t.passed is False)
    return Verdict("FAIL" if failed else "PASS", alpha, rule, failed)
