"""The McNemar table of a GSM8K run (torch-free): one row per pair with wins, losses,
ties, the exact p and the family-adjusted p, both groups' accuracies with Wilson
intervals, and the accuracy drop the pair could detect at the protocol's size.

Rows are recognised by their detail (``wins``/``losses``/``accuracy_base``, written by
specconform.kinds.mcnemar.evaluate), so the table renders from any archive's
results/tests.json without the protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

from specconform.details.cases import Accuracy, Detectable, McNemarPairDetail
from specconform.results import Evaluation, TestRow


def is_mcnemar_row(row: TestRow) -> bool:
    return isinstance(row.detail, McNemarPairDetail)


def _acc(a: Accuracy) -> str:
    return f"{a.correct}/{a.n} = {a.accuracy:.3f} [{a.wilson_low:.3f}, {a.wilson_high:.3f}]"


def _p(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _drop(detectable: Detectable) -> str:
    d = detectable.min_drop
    return (
        "none at any discordance"
        if d is None
        else f"≥ {d:.3f} (power {detectable.power:g}, α/m = {detectable.level:.3g})"
    )


def mcnemar_rows(evaluation: Evaluation) -> list[list[str]]:
    out = []
    for r in evaluation.tests:
        d = r.detail
        if not isinstance(d, McNemarPairDetail):
            continue
        result = r.status if r.status != "NO_EVIDENCE" else "no evidence"
        out.append(
            [
                r.test,
                d.metric,
                f"{d.base} → {d.candidate}",
                str(d.wins),
                str(d.losses),
                str(d.ties),
                f"{_p(d.pvalue_worse)} / {_p(d.pvalue_two_sided)}",
                _p(r.adjusted_pvalue),
                "info" if result == "INFO" else result,
                _acc(d.accuracy_base),
                _acc(d.accuracy_candidate),
                _drop(d.detectable),
            ]
        )
    return out


HEADER = (
    "pair",
    "metric",
    "base → candidate",
    "wins",
    "losses",
    "ties",
    "p one-sided / two-sided",
    "p_Holm",
    "result",
    "accuracy base [Wilson 95%]",
    "accuracy candidate [Wilson 95%]",
    "detectable drop",
)


def mcnemar_markdown(evaluation: Evaluation, table) -> list[str]:
    """Markdown lines (``table`` is report.markdown.table); empty without McNemar rows."""
    rows = mcnemar_rows(evaluation)
    if not rows:
        return []
    return [
        *table(HEADER, rows),
        "",
        "wins: trials the candidate answered correctly and the base did not; losses: the "
        "reverse; ties: both right or both wrong. Exact McNemar (binomial law of the "
        "losses among the discordant trials); detectable drop: the smallest accuracy drop "
        "detected with the stated power, by a candidate that loses every trial on which "
        "the groups disagree (exact power; other discordance rates in results/plan.json).",
    ]


def mcnemar_sections(views: Sequence, table) -> list[str]:
    out: list[str] = []
    for view in views:
        lines = mcnemar_markdown(view.evaluation, table)
        if lines:
            out += ["", f"### McNemar: {view.label} `{view.run_id}`", "", *lines]
    return out
