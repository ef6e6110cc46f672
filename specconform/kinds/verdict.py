"""Family-wise verdicts: how a protocol's deciding tests combine into PASS, FAIL or
INCONCLUSIVE.

A protocol pre-registers ``verdict: {combine: holm|bonferroni, alpha: A}``. The deciding
tests (rows whose role the protocol lists in ``decision_roles``) are of three sorts:

- *stochastic*: a p-value exists. Their p-values are adjusted together (Holm's step-down
  or Bonferroni, :func:`specconform.stats.aggregate.adjust`) and each passes iff its
  adjusted p >= A. Both rules keep P(any false fail) <= A under any dependence
  between the tests, so the verdict's false-fail rate from these m tests is <= A.
- *deterministic*: a rule without a p-value that a correct engine never breaks (an
  observation of reference probability 0, an engine error, a quadrature bound): such a
  failure is impossible under the null and adds nothing to the false-fail rate.
- *no evidence* (df 0, no stratum, every cell pooled): the row keeps status NO_EVIDENCE
  and the reason "no evidence"; it is not a failure of the engine, so the verdict is
  INCONCLUSIVE unless another deciding test FAILs (then FAIL). The stated false-fail rate
  is about FAIL only; INCONCLUSIVE says the seeds were too few (``run`` and ``gate``
  check the plan before any work: :mod:`specconform.planning.evidence`).

Outcome: FAIL if any deciding test failed (adjusted p below alpha, or a deterministic rule
broken), else INCONCLUSIVE if any deciding test had no evidence, else PASS.

Rows that do not decide keep their own per-test level (the protocol's ``alpha``) and
never change the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from specconform.results import (
    FAIL,
    INCONCLUSIVE,
    INFO,
    NO_EVIDENCE,
    PASS,
    RESULTS_SCHEMA,
    Decision,
    TestRow,
    Verdict,
)
from specconform.stats.aggregate import COMBINE_LABELS, adjust
from specconform.util.errors import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS

REASON_NO_EVIDENCE = "no evidence"
REASON_ENGINE_ERRORS = "engine errors"


@dataclass(frozen=True)
class FamilyRule:
    """The pre-registered decision: deciding roles, combination, the verdict's stated
    false-fail rate ``alpha`` and the ``reserve`` of it the p-value family leaves unspent
    (near-tie limits and margin for real numerics; protocol/schema.py FamilyVerdict)."""

    roles: tuple[str, ...]
    combine: str  # "holm" | "bonferroni"
    alpha: float
    reserve: float = 0.0

    @property
    def label(self) -> str:
        return COMBINE_LABELS[self.combine]

    @property
    def level(self) -> float:
        """What the adjusted p-values are compared with: alpha less the reserve."""
        return self.alpha - self.reserve

    @classmethod
    def from_protocol(cls, protocol: dict, default_roles: Sequence[str]) -> FamilyRule:
        """From a protocol's JSON data; a protocol without ``verdict`` gets Holm at its
        ``alpha`` (the schema fills the same default)."""
        spec = protocol.get("verdict") or {}
        roles = tuple(protocol.get("decision_roles") or default_roles)
        alpha = spec.get("alpha")
        return cls(
            roles,
            str(spec.get("combine", "holm")),
            float(protocol["alpha"] if alpha is None else alpha),
            float(spec.get("numerics_reserve") or 0.0),
        )


def family_verdict(
    rows: Sequence[TestRow], rule: FamilyRule
) -> tuple[tuple[TestRow, ...], Verdict]:
    """Rows with deciding rows adjusted (``adjusted_pvalue``, ``passed``, ``status``,
    ``reason``) and the verdict. Non-deciding rows come back unchanged."""
    deciding = [i for i, r in enumerate(rows) if r.role in rule.roles]
    pvalues = {
        i: p
        for i in deciding
        if rows[i].status in (PASS, FAIL) and (p := rows[i].pvalue) is not None and math.isfinite(p)
    }
    stochastic = list(pvalues)
    adjusted = dict(
        zip(stochastic, adjust([pvalues[i] for i in stochastic], rule.combine), strict=True)
    )
    out, reasons = list(rows), []
    label = f"p_{rule.label}"
    for i in deciding:
        row = rows[i]
        if i in adjusted:
            ok = adjusted[i] >= rule.level
            new = replace(
                row,
                adjusted_pvalue=adjusted[i],
                adjusted_method=rule.label,
                alpha=rule.level,
                passed=ok,
                status=PASS if ok else FAIL,
                deciding=True,
                reason="" if ok else f"{label} < {rule.level:g}",
            )
        elif row.status == NO_EVIDENCE or row.status == INFO:
            new = replace(
                row,
                passed=False,
                status=NO_EVIDENCE,
                deciding=True,
                reason=row.reason or REASON_NO_EVIDENCE,
            )
        else:  # deterministic rule: PASS/FAIL as the row states
            new = replace(
                row, deciding=True, reason="" if row.passed else (row.reason or "rule broken")
            )
        out[i] = new
        if new.passed is False:
            reasons.append((new.test, new.reason))
    inconclusive = tuple(out[i].test for i in deciding if out[i].status == NO_EVIDENCE)
    failed = tuple(name for name, _ in reasons if name not in inconclusive)
    m = len(stochastic)
    det = [rows[i].test for i in deciding if i not in adjusted and rows[i].status in (PASS, FAIL)]
    if m:
        statement = f"false-fail rate ≤ {rule.alpha:g} over {m} tests ({rule.label})"
        if rule.reserve:
            statement = (
                f"false-fail rate ≤ {rule.alpha:g}: {rule.label} at {rule.level:g} over {m} "
                f"tests, {rule.reserve:g} reserved for real numerics (near-tie limits, margin)"
            )
        text = (
            f"PASS iff every {'/'.join(rule.roles)} test has evidence and {label} >= "
            f"{rule.level:g} ({m} tests)"
        )
    else:
        statement = "false-fail rate 0: deterministic checks only"
        text = f"PASS iff every {'/'.join(rule.roles)} check holds"
    if det and m:
        text += f", and the deterministic checks ({', '.join(det)}) hold"
        statement += f"; {', '.join(det)} fail only on events a correct engine never shows"
    verdict = Verdict(
        FAIL if failed else (INCONCLUSIVE if inconclusive else PASS),
        rule.alpha,
        text,
        failed,
        combine=rule.combine,
        family_size=m,
        statement=statement,
        reasons=tuple(reasons),
        schema=RESULTS_SCHEMA,
        inconclusive=inconclusive,
    )
    return tuple(out), verdict


SUPPORT_METHOD = "none (deterministic: impossible under the null)"
ENGINE_ERRORS_METHOD = "none (deterministic: a correct engine raises no error on valid laws)"


def deterministic_row(
    test: str, statistic: float, n: int, alpha: float, ok: bool, detail, method: str, reason: str
) -> TestRow:
    """A primary row decided by a rule a correct engine never breaks (no p-value):
    ``statistic`` offenders, PASS iff ``ok``; ``reason`` is stated only on FAIL."""
    decision = Decision(PASS, True) if ok else Decision(FAIL, False, reason)
    return TestRow.decided(test, "primary", statistic, n, alpha, detail, method, decision)


def coverage_info_row(share: float, n: int, alpha: float, detail) -> TestRow:
    """The exploratory ``coverage`` row: the smallest share of eligible samples the
    strata of any stratified test covered. Descriptive, never decides."""
    return TestRow.decided(
        "coverage",
        "exploratory",
        float(share),
        n,
        alpha,
        detail,
        "none (descriptive)",
        Decision(INFO, None),
    )


def stochastic_row(
    spec: dict,
    statistic,
    df,
    pvalue,
    n: int,
    alpha: float,
    detail,
    method: str,
    reason_none: str,
    detail_none: str,
) -> TestRow:
    """A stochastic row at the per-test level; :func:`family_verdict` re-decides deciding
    rows. NaN/None p-value or n 0: no evidence (never a pass), with ``reason_none`` as
    the row's reason and ``detail_none`` as its detail's ``no_evidence``."""
    role = spec["role"]
    evidence = n > 0 and pvalue is not None and bool(np.isfinite(pvalue))
    if not evidence:
        # an exploratory row without evidence keeps passed None: it never decides
        decision = Decision(NO_EVIDENCE, None if role == "exploratory" else False, reason_none)
        detail = detail.replace(no_evidence=detail_none)
    elif role == "exploratory":
        decision = Decision(INFO, None)
    else:
        decision = Decision(PASS, True) if pvalue >= alpha else Decision(FAIL, False)
    return TestRow.decided(
        spec["name"],
        role,
        None if statistic is None else float(statistic),
        int(n),
        alpha,
        detail,
        method,
        decision,
        df=df,
        pvalue=float(pvalue) if evidence else None,
    )


@dataclass(frozen=True)
class Outcome:
    """How a front end ends on a verdict: its exit code and, where the verdict is read
    by a policy (gate on INCONCLUSIVE), the one line that says so (else "")."""

    exit_code: int
    line: str = ""


def run_outcome(verdict: str) -> Outcome:
    """`run`: PASS 0, FAIL 1, INCONCLUSIVE 7 (errors.EXIT_INCONCLUSIVE)."""
    return Outcome({PASS: EXIT_PASS, FAIL: EXIT_FAIL}.get(verdict, EXIT_INCONCLUSIVE))


def gate_outcome(verdict: str, protocol: dict, *, inconclusive_ok: bool) -> Outcome:
    """`gate`: as `run`, but an INCONCLUSIVE verdict is read by a policy: a failure
    (exit 7) unless ``--inconclusive-ok`` or the protocol's ``verdict.inconclusive: pass``
    accepts it (exit 0); either way one line says which rule applied."""
    if verdict != INCONCLUSIVE:
        return run_outcome(verdict)
    stated = str((protocol.get("verdict") or {}).get("inconclusive") or "fail")
    if inconclusive_ok:
        return Outcome(EXIT_PASS, "gate: INCONCLUSIVE accepted (--inconclusive-ok)")
    if stated == "pass":
        return Outcome(
            EXIT_PASS, "gate: INCONCLUSIVE accepted (protocol verdict.inconclusive: pass)"
        )
    return Outcome(
        EXIT_INCONCLUSIVE,
        "gate: INCONCLUSIVE counts as a failure (a deciding test had no evidence); "
        "--inconclusive-ok or the protocol's verdict.inconclusive: pass accepts it",
    )
