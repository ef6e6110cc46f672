"""McNemar evaluation (torch-free): rescoring, exact McNemar per pair, Wilson accuracies.

Rows, in order:

- ``engine_errors`` (deterministic, deciding): requests that ended in an engine error,
  at most ``engine_errors.tolerance`` per group;
- ``mcnemar_<pair>`` (the pair's role; deciding when the role is in ``decision_roles``):
  the exact McNemar test of the pair on the protocol's ``metric``; with ``fail_on:
  worse`` its p is one-sided (the candidate loses more trials than it wins), with
  ``different`` two-sided (statsmodels ``mcnemar(exact=True)``); both are in the detail;
  its statistic is losses - wins (positive: the candidate answered fewer correctly);
- ``mcnemar_<pair>_<other>`` (exploratory, INFO): the same on the other metric;
- ``accuracy_<group>_<metric>`` (exploratory, INFO): accuracy (the statistic) with its
  Wilson 95 % interval.

Evidence. A pair has evidence iff its data could tell the candidate apart from one that
answers every trial wrongly: with ``fail_on: worse`` iff the base answered at least one
trial correctly (a candidate cannot lose correct answers the base never had), with
``different`` iff either group did. Without it the row is NO_EVIDENCE (a deciding
NO_EVIDENCE row fails the verdict with its reason, as every kind's does).

Ties (no discordant trial). The exact conditional law is then a point mass: p = 1, a
legitimate value, and, with evidence as above, the row is evidence of no regression: the
candidate reproduced every correct answer of the base (an always-wrong candidate would
have lost them all), which bounds the accuracy difference by the discordance rate (0
discordant of n trials: below 3/n at 95 %, the rule of three).

The verdict (kinds.verdict.family_verdict): PASS iff every deciding row has evidence and
Holm's (or Bonferroni's) adjusted p >= the verdict's alpha, and no group has more engine
errors than tolerated. The detectable accuracy drop at the protocol's size (power
planning, ``plan.detectable``) is in every pair row's detail and in results/plan.json.
"""

from __future__ import annotations

from specconform.details.cases import (
    Accuracy,
    Detectable,
    ErrorCountsDetail,
    GroupAccuracyDetail,
    McNemarPairDetail,
)
from specconform.kinds.mcnemar import plan
from specconform.kinds.mcnemar.paired import exact_mcnemar, wilson
from specconform.kinds.mcnemar.raw import GroupSamples, load
from specconform.kinds.mcnemar.scoring import METRICS
from specconform.kinds.verdict import FamilyRule, family_verdict
from specconform.results import FAIL, INFO, NO_EVIDENCE, PASS, Evaluation, RawData, TestRow

SHORT = {"strict-match": "strict", "flexible-extract": "flexible"}
NO_CORRECT = "neither group answered any trial correctly"
NO_BASE_CORRECT = "the base answered no trial correctly: nothing to lose"


def pair_row(protocol: dict, pair: dict, metric: str, groups: dict[str, GroupSamples]) -> TestRow:
    deciding_metric = metric == protocol["metric"]
    base, cand = groups[pair["base"]], groups[pair["candidate"]]
    res = exact_mcnemar(base.correct(metric), cand.correct(metric), protocol["fail_on"])
    alpha = float(protocol["alpha"])
    acc_b = wilson(sum(base.correct(metric)), res.n)
    acc_c = wilson(sum(cand.correct(metric)), res.n)
    tie = (
        f"no discordant trial: the candidate kept all {res.both_right} correct answers "
        "of the base and gained none; p = 1 (the conditional law is a point mass)"
        if res.discordant == 0 and res.both_right
        else None
    )
    detail = McNemarPairDetail(
        metric=metric,
        base=pair["base"],
        candidate=pair["candidate"],
        trials=res.n,
        **{key: getattr(res, key) for key in _PAIR_COUNTS},
        fail_on=res.alternative,
        accuracy_base=_accuracy(acc_b),
        accuracy_candidate=_accuracy(acc_c),
        accuracy_difference=acc_c.value - acc_b.value,
        detectable=Detectable.from_json(plan.detectable(protocol, res.n)),
        tie=tie,
    )
    base_correct = res.both_right + res.losses
    evidence = base_correct > 0 if res.alternative == "worse" else base_correct + res.wins > 0
    name = f"mcnemar_{pair['name']}" + ("" if deciding_metric else f"_{SHORT[metric]}")
    method = (
        "exact McNemar, one-sided (losses > wins): binomial"
        if res.alternative == "worse"
        else "exact McNemar, two-sided (statsmodels)"
    )
    if not deciding_metric:
        status, passed, reason = INFO, None, ""
    elif not evidence:
        reason = NO_BASE_CORRECT if res.wins else NO_CORRECT
        status, passed = NO_EVIDENCE, False
    else:
        passed = res.pvalue >= alpha
        status, reason = (PASS, "") if passed else (FAIL, f"p < {alpha:g}")
    return TestRow(
        test=name,
        role=pair["role"] if deciding_metric else "exploratory",
        statistic=float(res.losses - res.wins),
        df=None,
        pvalue=res.pvalue if evidence else None,
        n=res.n,
        alpha=alpha,
        passed=passed,
        status=status,
        detail=detail,
        reason=reason,
        pvalue_method=method,
    )


def accuracy_row(protocol: dict, group: GroupSamples, metric: str) -> TestRow:
    marks = group.correct(metric)
    acc = wilson(sum(marks), len(marks))
    return TestRow(
        test=f"accuracy_{group.group}_{SHORT[metric]}",
        role="exploratory",
        statistic=acc.value,
        df=None,
        pvalue=None,
        n=acc.n,
        alpha=float(protocol["alpha"]),
        passed=None,
        status=INFO,
        detail=GroupAccuracyDetail(metric=metric, group=group.group, **_accuracy(acc).to_json()),
        pvalue_method="none (accuracy, Wilson interval)",
    )


def errors_row(protocol: dict, groups: dict[str, GroupSamples], role: str) -> TestRow:
    tolerance = int(protocol["engine_errors"]["tolerance"])
    errors = {g: s.errors for g, s in groups.items()}
    over = sorted(g for g, e in errors.items() if e > tolerance)
    return TestRow(
        test="engine_errors",
        role=role,
        statistic=float(sum(errors.values())),
        df=None,
        pvalue=None,
        n=sum(len(s.scores) for s in groups.values()),
        alpha=0.0,
        passed=not over,
        status=FAIL if over else PASS,
        detail=ErrorCountsDetail(errors=errors, tolerance=tolerance),
        reason=f"engine errors in {', '.join(over)}" if over else "",
        pvalue_method="none (deterministic: requests ending in an engine error)",
    )


# The McNemar result's counts and p-values, under the same names in the pair's record.
_PAIR_COUNTS = (
    "wins",
    "losses",
    "ties",
    "both_right",
    "both_wrong",
    "discordant",
    "pvalue_two_sided",
    "pvalue_worse",
)


def _accuracy(acc) -> Accuracy:
    return Accuracy(
        correct=acc.correct,
        n=acc.n,
        accuracy=acc.value,
        wilson_low=acc.low,
        wilson_high=acc.high,
        level=acc.level,
    )


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    _, groups = load(raw, protocol)
    rule = FamilyRule.from_protocol(protocol, ["primary"])
    rows = [errors_row(protocol, groups, rule.roles[0])]
    others = [m for m in METRICS if m != protocol["metric"]]
    for metric in (protocol["metric"], *others):
        rows += [pair_row(protocol, pair, metric, groups) for pair in protocol["pairs"]]
    for metric in (protocol["metric"], *others):
        rows += [accuracy_row(protocol, groups[g["name"]], metric) for g in protocol["groups"]]
    decided, verdict = family_verdict(rows, rule)
    return Evaluation(decided, verdict)
