"""Monte Carlo evaluation (torch-free): Pearson χ² of kernel outcome counts against the
analytic laws of speculative sampling.

At position j, among rows whose drafts 0..j-1 were accepted and whose draft length
exceeds j, the outcome (accepted?, committed token) has law

    P(accept, x) = min(p_j, q_j)(x),    P(reject, x) = (p_j - q_j)_+(x),

a 2V-cell law summing to 1. Rows that accepted all L drafts commit a bonus token with
law p_L. Every (case, position, cell family) with data is one Pearson test with the
fixed pooling rule, its p-value from the χ² law or, with ``pvalue: monte_carlo``, from
multinomial samples (exact level at the deep positions' small sizes: stats/gof_mc.py); the tests combine by the protocol's ``verdict`` rule (Holm or
Bonferroni, :mod:`specconform.kinds.verdict`), so the verdict's false-fail rate is at
most its alpha. A test whose cells all pool into one has no evidence and fails. Any
kernel error flag on these valid laws fails the protocol ("engine errors"), as does a
committed token outside the vocabulary.
"""

from __future__ import annotations

import numpy as np

from specconform.details.runs import KernelErrorsDetail, MonteCarloCellDetail, OutOfVocabDetail
from specconform.kinds.laws import as_exact, montecarlo_laws
from specconform.kinds.verdict import (
    REASON_ENGINE_ERRORS,
    FamilyRule,
    deterministic_row,
    family_verdict,
)
from specconform.results import FAIL, NO_EVIDENCE, PASS, Evaluation, RawData, TestRow
from specconform.stats import pearson_gof
from specconform.stats.gof_mc import pearson_gof_mc
from specconform.stats.speculative import joint_cells


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    counts = raw.csv("raw/montecarlo_counts.csv")
    alpha = float(protocol["alpha"])
    min_expected = float(protocol["min_expected"])
    planned = []  # (name, case, observed, probs, detail)
    errors = int(counts.loc[counts["cell"] == "error", "count"].sum())
    committed = counts[counts["cell"] != "error"]
    out_of_vocab = 0
    for case in protocol["cases"]:
        p32, q32 = montecarlo_laws(case)
        V, K = int(case["vocab"]), int(case["K"])
        mine = committed[committed["case"] == case["name"]]
        bad = (mine["token"] < 0) | (mine["token"] >= V)
        out_of_vocab += int(mine.loc[bad, "count"].sum())
        mine = mine[~bad]
        for j in range(K + 1):
            at = mine[mine["position"] == j]
            acc, rej, bon = (_vector(at, cell, V) for cell in ("accept", "reject", "bonus"))
            if j < K and acc.sum() + rej.sum() > 0:
                probs = joint_cells(as_exact(p32[j]), as_exact(q32[j]))
                planned.append(
                    (
                        f"{case['name']}_pos{j}_joint",
                        case["name"],
                        j,
                        np.concatenate([acc, rej]),
                        probs,
                    )
                )
            if bon.sum() > 0:
                planned.append(
                    (f"{case['name']}_pos{j}_bonus", case["name"], j, bon, as_exact(p32[j]))
                )
    # Archives written before the `pvalue` field have chi2 (their protocol.json lacks it).
    monte_carlo = protocol.get("pvalue", "chi2") == "monte_carlo"
    replications = int(protocol.get("mc_replications", 19_999))
    method = f"monte carlo ({replications} multinomial samples)" if monte_carlo else "chi2"
    tests = []
    for name, case_name, j, observed, probs in planned:
        if monte_carlo:
            res = pearson_gof_mc(
                observed, probs, min_expected=min_expected, replications=replications, name=name
            )
        else:
            res = pearson_gof(observed, probs, min_expected=min_expected)
        expected = probs / probs.sum() * observed.sum()
        top = np.argsort(-expected, kind="stable")[:16]
        evidence = bool(np.isfinite(res.pvalue))
        status = NO_EVIDENCE if not evidence else (PASS if res.pvalue >= alpha else FAIL)
        tests.append(
            TestRow(
                test=name,
                role="primary",
                statistic=float(res.statistic),
                df=float(res.df),
                pvalue=float(res.pvalue) if evidence else None,
                n=int(res.n),
                alpha=alpha,
                passed=status == PASS,
                status=status,
                pvalue_method=method,
                reason="" if evidence else "no evidence",
                detail=MonteCarloCellDetail(
                    case=case_name,
                    position=j,
                    cells=int(res.cells),
                    pooled=tuple(int(i) for i in res.pooled),
                    out_of_support=int(res.out_of_support),
                    cell_index=tuple(int(i) for i in top),
                    observed=tuple(int(observed[i]) for i in top),
                    expected=tuple(float(expected[i]) for i in top),
                ),
            )
        )
    deterministic = (
        (
            "out_of_vocab",
            out_of_vocab,
            committed,
            OutOfVocabDetail(tokens=out_of_vocab),
            "out of vocabulary",
        ),
        (
            "kernel_errors",
            errors,
            counts,
            KernelErrorsDetail(error_rows=errors),
            REASON_ENGINE_ERRORS,
        ),
    )
    for test, bad, frame, detail, reason in deterministic:
        n = int(frame["count"].sum())
        row = deterministic_row(
            test, float(bad), n, alpha, bad == 0, detail, "none (deterministic)", reason
        )
        tests.append(row)
    rows, verdict = family_verdict(tests, FamilyRule.from_protocol(protocol, ("primary",)))
    return Evaluation(rows, verdict)


def _vector(frame, cell: str, vocab: int) -> np.ndarray:
    """Counts of one cell family as a [vocab] int64 vector (tokens already in range)."""
    sel = frame[frame["cell"] == cell]
    out = np.zeros(vocab, dtype=np.int64)
    np.add.at(out, sel["token"].to_numpy(), sel["count"].to_numpy())
    return out
