"""Replications of the shipped sampled tree files on their exact laws (issues 33/34):
the harness of bench/calibration_tree.py (specconform/calibration/tree.py), a small
deterministic calibration of each exact and lossy file, and negative controls through
the real collector with planted tree bugs. Full tables: docs/tree.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from specconform.calibration.tree import (
    COUNT_COLUMNS,
    exact_tv,
    law_counts,
    law_tables,
    replicate_law,
    sampler_law,
)
from specconform.kinds.tree.laws import target_law, tree_of
from specconform.protocol.load import load_protocol
from tests.toolkit.script_loader import load_bench

ROOT = Path(__file__).resolve().parents[2]
SAMPLED = ROOT / "protocols/tree_sampled.yaml"
LOSSY = ROOT / "protocols/tree_lossy.yaml"


def _state(path: Path, sampler: str = "law", mutant: str | None = None):
    bench = load_bench("calibration_tree")
    bench._init(str(path), sampler, 7, 10**6, mutant)
    return bench


def _law_replications(path: Path, count: int) -> list:
    """``count`` replications of a shipped file on its exact law (the bench's law
    sampler), seed 7."""
    bench = _state(path)
    state = bench._STATE
    return replicate_law(state["protocol"], state["edges"], count, seed=7, tables=state["tables"])


def _count_bound(runs: int, rate: float, *, detects: float) -> float:
    """The 99.9 % quantile of Binomial(runs, rate): a count of events of probability
    ``rate`` exceeds it with probability <= 0.001 (the check's error); checked here to
    be exceeded with probability >= 0.96 when the events' rate is ``detects`` (power)."""
    bound = sps.binom.ppf(0.999, runs, rate)
    assert sps.binom.sf(bound, runs, detects) >= 0.96
    return bound


def test_exact_tv_is_zero_at_thresholds_one_and_positive_when_lossy():
    protocol = load_protocol(LOSSY).data
    for case in protocol["cases"]:
        tree = tree_of(case)
        assert sampler_law(tree, protocol["settings"][0]).probs == target_law(tree).probs
        for j in range(tree.height + 1):
            assert exact_tv(tree, protocol["settings"][0], j) == 0.0
    # (0.3, 0.3) accepts most candidates outright: far from the target law at position 0
    wide = tree_of(protocol["cases"][0])
    assert exact_tv(wide, protocol["settings"][3], 0) > 0.25


def test_law_counts_have_the_runner_layout_and_follow_the_law():
    protocol = load_protocol(SAMPLED).data
    tables = law_tables(protocol)
    counts = law_counts(protocol, tables, np.random.default_rng(0))
    n = protocol["seeds"]["count"]
    assert list(counts.columns) == ["setting", "source", "case", "tokens", "path", "count"]
    assert (counts.groupby("case")["count"].sum() == n).all()
    assert set(counts["source"]) == {"sampled"}
    # Deterministic fact of the draw (no threshold): no sequence outside the exact law.
    for case in protocol["cases"]:
        law = target_law(tree_of(case)).probs
        mine = counts[counts["case"] == case["name"]]
        assert all(tuple(int(t) for t in s.split()) in law for s in mine["tokens"])


def test_replications_are_deterministic_and_disjoint():
    bench = _state(SAMPLED)
    protocol, edges = bench._STATE["protocol"], bench._STATE["edges"]
    a = replicate_law(protocol, edges, 2, seed=7)
    b = replicate_law(protocol, edges, 1, seed=7, start=1)
    assert a[1].verdict == b[0].verdict and a[1].failed == b[0].failed
    tables = law_tables(protocol)
    c0 = law_counts(protocol, tables, np.random.default_rng([7, 0]))
    c1 = law_counts(protocol, tables, np.random.default_rng([7, 1]))
    assert not c0["count"].equals(c1["count"])
    with pytest.raises(ValueError, match="deterministic"):
        replicate_law(load_protocol(ROOT / "protocols/tree.yaml").data, edges, 1, seed=7)


@pytest.mark.slow
def test_small_calibration_of_tree_sampled():
    # 50 replications of the shipped tree_sampled file (Holm at alpha 0.01) on its exact
    # law, seed 7. Its verdict's false fails are ~Binomial(50, <= 0.01) if the file holds
    # its alpha; the bound is that law's 99.9 % quantile (4), so this check errs with
    # probability <= 0.001. It detects a verdict false-fail rate >= 0.18 with probability
    # >= 0.96; finer miscalibration is the 600-replication bench's job (docs/tree.md).
    runs = _law_replications(SAMPLED, 50)
    bound = _count_bound(50, 0.01, detects=0.18)
    assert bound == 4
    assert sum(r.verdict != "PASS" for r in runs) <= bound
    # the structure rows are deterministic: never one of the failures
    assert not any("structure" in t for r in runs for t in r.failed)


@pytest.mark.slow
def test_small_coverage_of_tree_lossy():
    # 30 replications of the shipped tree_lossy file (TV intervals simultaneous at 0.95,
    # Bonferroni over its 40 TV rows) on the reference rule's exact laws, seed 7. A
    # replication where some interval misses its exact TV has probability <= 0.05 if the
    # file holds its confidence; the bound is the 99.9 % quantile of Binomial(30, 0.05)
    # (6): errs with probability <= 0.001, detects a miss rate >= 0.45 with probability
    # >= 0.96. (The Weissman interval is conservative: no miss is expected at all.)
    runs = _law_replications(LOSSY, 30)
    bound = _count_bound(30, 0.05, detects=0.45)
    assert bound == 6
    assert sum(not r.covered_all for r in runs) <= bound
    assert all(r.tv_rows == 40 for r in runs)
    # The lossy settings exceed max_tv by design: every verdict FAILs on their rows only.
    assert all(r.verdict == "FAIL" and not any(t.startswith("s0_") for t in r.failed)
               for r in runs)  # fmt: skip


def test_negative_control_of_the_law_harness():
    # The law sampler drawing a lossy rule's law, (0.3, 0.3), under the exact file's
    # tests: that rule moves the wide case's position-0 law by TV > 0.25, which 50,000 rows
    # detect with power ~1 at Holm's smallest threshold, so the verdict must FAIL.
    # (No edge rows: the structure rows then read the sampled rows alone.)
    protocol = load_protocol(SAMPLED).data
    protocol["settings"] = [{"threshold_single": 0.3, "threshold_acc": 0.3}]
    rep = replicate_law(protocol, pd.DataFrame(columns=COUNT_COLUMNS), 1, seed=7)[0]
    assert rep.verdict == "FAIL" and any(t.startswith("wide_pos") for t in rep.failed)


@pytest.mark.slow
def test_negative_control_tree_sampled_fails_with_a_planted_bug():
    # tree_residual_stale moves the wide case's position-0 law by far more than 50,000
    # rows need (docs/kill-matrix.md, "Tree": killed at the first seeds), so both
    # replications through the real collector must FAIL, on a chi-square row.
    bench = _state(SAMPLED, "reference", "tree_residual_stale")
    runs = [bench._one(r) for r in range(2)]
    assert all(r.verdict == "FAIL" for r in runs)
    assert all(any("_pos" in t for t in r.failed) for r in runs)


@pytest.mark.slow
def test_negative_control_lossy_coverage_misses_with_a_planted_bug():
    # The coverage harness compares each interval with the exact TV of the un-mutated
    # rule. With tree_residual_stale the sampler's real distance at (1, 1) is not 0, and
    # 50,000 rows put the intervals (half-width <= 0.02) away from 0: rows must miss.
    bench = _state(LOSSY, "reference", "tree_residual_stale")
    rep = bench._one(0)
    assert rep.tv_rows == 40 and any(t.startswith("s0_") for t in rep.missed)


@pytest.mark.slow
def test_reference_sampler_run_passes_at_the_null():
    # The same harness on the real collector with the exact reference sampler: one
    # replication at a fixed offset PASSes (a FAIL here has probability <= 0.01 by the
    # file's own alpha, and the offset is fixed, so the test is deterministic).
    bench = _state(SAMPLED, "reference")
    assert bench._one(0).verdict == "PASS"
