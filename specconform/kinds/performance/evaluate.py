"""Performance evaluation (torch-free): the pre-registered no-regression rule, recomputed
from the raw per-process measurements.

Raw data, ``raw/performance.json`` (written by specconform.runner.performance)::

    {"order": [{"side": "base", "process": 0}, {"side": "candidate", "process": 0}, ...],
     "sides": {"base": {...provenance, configuration...}, "candidate": {...}},
     "processes": [{"side", "process", "device",
                    "cells": [{"concurrency": int, "sampling": "greedy" | "random",
                               "peak_memory_bytes": int,
                               "runs": [{"seconds": float, "tokens": int,
                                         "requests": int, "rounds": int}, ...]}]}],
     "profile": {"base": {...}, "candidate": {...}}}      # optional (profile: null)

The unit of replication is the *process* (a fresh interpreter, engine and allocator):
a process's tokens/s in a cell is its committed tokens over its timed seconds (all
timed runs together); TPOT is the mean over its timed runs of seconds per output token
of one request (``seconds / (tokens / requests)``: the requests of a run decode in
lockstep); its peak memory is the cell's peak (CUDA: max allocated over the cell's
timed runs; CPU: the process's peak RSS so far, a monotone upper bound). Each side's
figure is mean ± SD [min, max] over its processes.

Rows: ``abba_order`` (deterministic: the recorded run order is A B B A A B ... with the
protocol's number of processes per side; anything else is not this design), one
``tokens_per_s_c<C>_<sampling>`` per cell (statistic: candidate mean / base mean; the
protocol's criterion decides; no p-value: it is a tolerance rule whose false-fail rate
depends on the noise the SD columns show; a Welch t-test is reported beside it,
never deciding), and ``profile`` (INFO) with the per-phase attribution.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from specconform.details.runs import MetricSummary, OrderDetail, ProfileDetail, ThroughputDetail
from specconform.kinds.verdict import FamilyRule, family_verdict
from specconform.results import FAIL, INFO, NO_EVIDENCE, PASS, Evaluation, RawData, TestRow

RAW_FILE = "raw/performance.json"
SIDES = ("base", "candidate")
STATISTIC = "candidate mean tokens/s over base mean tokens/s"


@dataclass(frozen=True)
class Summary:
    """mean ± SD [min, max] over n processes (SD with n - 1; None below two)."""

    n: int
    mean: float | None
    sd: float | None
    min: float | None
    max: float | None

    def record(self) -> MetricSummary:
        return MetricSummary(n=self.n, mean=self.mean, sd=self.sd, min=self.min, max=self.max)

    def text(self, digits: int = 4) -> str:
        if self.mean is None:
            return "no measurement"
        sd = "n/a" if self.sd is None else f"{self.sd:.{digits}g}"
        return (
            f"{self.mean:.{digits}g} ± {sd} [{self.min:.{digits}g}, {self.max:.{digits}g}]"
            f" (n={self.n})"
        )


def summarize(values: list[float]) -> Summary:
    if not values:
        return Summary(0, None, None, None, None)
    sd = statistics.stdev(values) if len(values) >= 2 else None
    return Summary(len(values), statistics.fmean(values), sd, min(values), max(values))


def abba_order(processes: int) -> list[str]:
    """The side of each process in run order: A B B A A B B A ... (`processes` each)."""
    return [side for pair in range(processes) for side in (SIDES if pair % 2 == 0 else SIDES[::-1])]


def _per_process(raw: dict, side: str, concurrency: int, sampling: str) -> dict[str, list]:
    """Each process's tokens/s, TPOT (ms) and peak memory (bytes) in one cell."""
    out: dict[str, list] = {"tokens_per_s": [], "tpot_ms": [], "peak_memory_bytes": []}
    for proc in raw["processes"]:
        if proc["side"] != side:
            continue
        for cell in proc["cells"]:
            if int(cell["concurrency"]) != concurrency or cell["sampling"] != sampling:
                continue
            runs = cell["runs"]
            seconds = sum(float(r["seconds"]) for r in runs)
            tokens = sum(int(r["tokens"]) for r in runs)
            if not runs or seconds <= 0 or tokens <= 0:
                continue
            out["tokens_per_s"].append(tokens / seconds)
            out["tpot_ms"].append(
                statistics.fmean(
                    1e3 * float(r["seconds"]) / (int(r["tokens"]) / int(r["requests"]))
                    for r in runs
                )
            )
            out["peak_memory_bytes"].append(float(cell["peak_memory_bytes"]))
    return out


def _welch(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch t-test p-value (reported only; never decides)."""
    if len(a) < 2 or len(b) < 2 or (len(set(a)) == 1 and len(set(b)) == 1):
        return None  # no spread: the t statistic is undefined
    from scipy import stats

    p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def evaluate_cell(protocol: dict, raw: dict, concurrency: int, sampling: str) -> TestRow:
    crit = protocol["criterion"]
    deciding = crit.get("deciding_concurrency")
    role = "primary" if deciding is None or concurrency in deciding else "secondary"
    measured = {side: _per_process(raw, side, concurrency, sampling) for side in SIDES}
    summaries = {
        side: {metric: summarize(values) for metric, values in measured[side].items()}
        for side in SIDES
    }
    base, cand = (summaries[s]["tokens_per_s"] for s in SIDES)
    name = f"tokens_per_s_c{concurrency}_{sampling}"
    detail = ThroughputDetail(
        statistic=STATISTIC,
        concurrency=concurrency,
        sampling=sampling,
        rule=crit["rule"],
        max_slowdown=crit["max_slowdown"],
        sides={side: {m: s.record() for m, s in summaries[side].items()} for side in SIDES},
        per_process={
            side: {m: tuple(values) for m, values in measured[side].items()} for side in SIDES
        },
        welch_pvalue=_welch(
            measured["base"]["tokens_per_s"], measured["candidate"]["tokens_per_s"]
        ),
    )
    if base.n < 2 or cand.n < 2:
        return TestRow(
            test=name, role=role, statistic=None, df=None, pvalue=None, n=base.n + cand.n,
            alpha=0.0, passed=None, status=NO_EVIDENCE, detail=detail,
            reason=f"no evidence: {base.n} base and {cand.n} candidate processes measured "
            "(two per side at least)",
            pvalue_method="none (tolerance rule)",
        )  # fmt: skip
    assert base.mean and cand.mean and base.min is not None and cand.max is not None
    ratio = cand.mean / base.mean
    floor = (1.0 - float(crit["max_slowdown"])) * base.mean
    within = cand.mean >= floor
    overlap = cand.max >= base.min
    passed = {"mean_within": within, "ranges_overlap": overlap, "either": within or overlap}[
        crit["rule"]
    ]
    detail = detail.replace(ratio=ratio, floor=floor, mean_within=within, ranges_overlap=overlap)
    reason = (
        ""
        if passed
        else (
            f"candidate {cand.text()} tokens/s vs base {base.text()}: ratio {ratio:.3f}, "
            f"rule {crit['rule']} (max slowdown {float(crit['max_slowdown']):.0%}) broken"
        )
    )
    return TestRow(
        test=name, role=role, statistic=ratio, df=None, pvalue=None, n=base.n + cand.n,
        alpha=0.0, passed=passed, status=PASS if passed else FAIL, detail=detail,
        reason=reason, pvalue_method="none (pre-registered tolerance rule)",
    )  # fmt: skip


def evaluate_order(protocol: dict, raw: dict) -> TestRow:
    expected = abba_order(int(protocol["processes"]))
    recorded = [entry["side"] for entry in raw["order"]]
    ran = [proc["side"] for proc in raw["processes"]]
    ok = recorded == expected and ran == expected
    detail = OrderDetail(expected=tuple(expected), recorded=tuple(recorded))
    return TestRow(
        test="abba_order", role="primary", statistic=None, df=None, pvalue=None,
        n=len(recorded), alpha=0.0, passed=ok, status=PASS if ok else FAIL, detail=detail,
        reason="" if ok else "processes did not run in the pre-registered ABBA order",
        pvalue_method="none (deterministic: design)",
    )  # fmt: skip


def profile_row(raw: dict) -> TestRow | None:
    profile = raw.get("profile")
    if not profile:
        return None
    from specconform.kinds.performance.profile import phase_table

    detail = ProfileDetail(
        **{side: phase_table(profile[side]) for side in SIDES if side in profile}
    )
    return TestRow(
        test="profile", role="exploratory", statistic=None, df=None, pvalue=None,
        n=sum(int(profile[s].get("steps", 0)) for s in SIDES if s in profile), alpha=0.0,
        passed=None,
        status=INFO, detail=detail, pvalue_method="none (attribution, reported only)",
    )  # fmt: skip


def evaluate(protocol: dict, raw: RawData) -> Evaluation:
    data = raw.json(RAW_FILE)
    rows = [evaluate_order(protocol, data)]
    rows += [
        evaluate_cell(protocol, data, int(c), s)
        for c in protocol["concurrency"]
        for s in protocol["sampling"]
    ]
    extra = profile_row(data)
    if extra is not None:
        rows.append(extra)
    decided, verdict = family_verdict(rows, FamilyRule(("primary",), "holm", 0.0))
    crit = protocol["criterion"]
    statement = (
        f"pre-registered tolerance rule {crit['rule']} (max slowdown "
        f"{float(crit['max_slowdown']):.0%} on mean tokens/s) over "
        f"{protocol['processes']} processes per side in ABBA order; no p-value: its "
        "false-fail rate depends on the run-to-run noise the SD columns show"
    )
    return Evaluation(decided, replace(verdict, statement=statement))
