"""Numerics of the deterministic checks in reports (issue 32, part 1): each check held
to the protocol's numerics model, with its tolerance and its filter near-ties (law
checks) or its near-ties (token checks) against the model's limit. A near-tie is a divergence inside the model's
error: counted and shown here, never silently excused (a passing row keeps no reason).

Reads the ``CheckDetail`` rows that carry a model (:mod:`specconform.kinds.sequence`),
and out_of_support's near-ties (``SequenceSupportDetail``: zero-probability tokens at a
filter threshold inside the error); archives without one contribute nothing. One set of lines for the terminal table (`run`)
and Markdown.
"""

from __future__ import annotations

from specconform.details.sequence import CheckDetail, SequenceSupportDetail
from specconform.report.section import DetailSection
from specconform.results import Evaluation, TestRow


def _num(x) -> str:
    return "—" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


Numbered = CheckDetail | SequenceSupportDetail


def _model_line(rows) -> str:
    first = next((d for _, d in rows if isinstance(d, CheckDetail)), None)
    m = first.numerics if first is not None and isinstance(first.numerics, dict) else {}
    return (
        f"Numerics model: {m.get('dtype')}, {m.get('reduction_length')}-term reductions, "
        f"{m.get('kernels')} kernels, scale {_num(m.get('scale'))} ({m.get('growth')} "
        "growth; docs/contracts.md). A near-tie is a divergence whose deciding uniform or "
        "logit gap lies within the model's error, or a support difference at a top-k/top-p "
        "threshold within it: counted, never a mismatch; more than the limit refutes the "
        "model (FAIL: under the model a correct engine exceeds it with chance at most the "
        "protocol's numerics.alpha per limited check, a level charged to the verdict's "
        "numerics reserve)."
    )


def _first_ties(rows) -> list[str]:
    out = []
    for row, d in rows:
        for ex in d.near_tie_examples or ():
            out.append(f"  {row.test} near-tie: {ex}")
    return out


class NumericsSection(DetailSection[Numbered]):
    title = "Numerics of the deterministic checks"
    header = ["check", "law bound", "tolerance", "max abs diff", "near-ties", "limit",
              "decisions", "result"]  # fmt: skip
    intro = (
        "numerics model (law checks: max |dp| vs tolerance, filter near-ties; "
        "token checks: near-ties):"
    )

    def rows(self, evaluation: Evaluation) -> list[tuple[TestRow, Numbered]]:
        checks: list[tuple[TestRow, Numbered]] = [
            (t, t.detail)
            for t in evaluation.tests
            if isinstance(t.detail, CheckDetail) and t.detail.numerics is not None
        ]
        support: list[tuple[TestRow, Numbered]] = [
            (t, t.detail)
            for t in evaluation.tests
            if isinstance(t.detail, SequenceSupportDetail) and t.detail.near_ties is not None
        ]
        return checks + support if checks else []

    def cells(self, row: TestRow, d: Numbered) -> list[str]:
        if isinstance(d, SequenceSupportDetail):
            return [row.test, "—", "—", "—", _num(d.near_ties), _num(d.near_tie_limit),
                    _num(d.decisions), row.status]  # fmt: skip
        bound = d.numerics.get("law_bound") if isinstance(d.numerics, dict) else None
        return [row.test, _num(bound), _num(d.tolerance), _num(d.max_abs_diff),
                _num(d.near_ties), _num(d.near_tie_limit), _num(d.decisions), row.status]  # fmt: skip

    def line(self, row: TestRow, d: Numbered) -> str:
        if isinstance(d, SequenceSupportDetail):
            return (
                f"  {row.test}: {d.near_ties} zero-probability token(s) at a filter "
                f"threshold inside the error (filter_margin <= 1) in {d.decisions} "
                f"filtered or greedy tokens (limit {d.near_tie_limit})  {row.status}"
            )
        if d.near_ties is not None and d.max_abs_diff is not None:  # a law check
            return (
                f"  {row.test}: max |dp| {_num(d.max_abs_diff)} vs tolerance "
                f"{_num(d.tolerance)} (the model's law bound); {d.near_ties} filter "
                f"near-tie(s) in {d.decisions} filtered comparisons (limit "
                f"{d.near_tie_limit})  {row.status}"
            )
        if d.near_ties is not None:
            return (
                f"  {row.test}: {d.near_ties} near-tie(s) in {d.decisions} decisions "
                f"(limit {d.near_tie_limit}), {d.mismatches} mismatch(es)  {row.status}"
            )
        return (
            f"  {row.test}: max |dp| {_num(d.max_abs_diff)} vs tolerance "
            f"{_num(d.tolerance)} (the model's law bound)  {row.status}"
        )

    def notes(self, rows) -> list[str]:
        return [_model_line(rows), *_first_ties(rows)]

    def terminal_notes(self, rows) -> list[str]:
        return [*_first_ties(rows), _model_line(rows)]


NUMERICS_SECTION = NumericsSection()
