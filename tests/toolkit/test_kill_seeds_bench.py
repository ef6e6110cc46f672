"""bench/kill_seeds_measured.py (issue 32, part 4): the search over N and the oracle's
statistic. Deterministic: a step-shaped rate function for the search, fixed seeds and
exact laws for the oracle; no rate threshold is asserted here (the script's own output
carries the oracle's measured size, its negative control)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest

from tests.toolkit.cli_helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import kill_seeds_measured as ks  # noqa: E402

from specconform.calibration import load_reference, simulate, world_from_reference  # noqa: E402
from specconform.planning import _group_law  # noqa: E402
from specconform.stats.speculative import joint_cells  # noqa: E402


def _step(threshold: int, calls: list[int]):
    def rate(n: int) -> ks.Point:
        calls.append(n)
        return ks.Point(n, 90 if n >= threshold else 50, 100)

    return rate


@pytest.mark.parametrize("start", [1, 20, 137, 1000, 5000])
def test_search_finds_the_step_from_below_and_above(start):
    calls: list[int] = []
    found = ks.search_n(_step(137, calls), start, 0.8, 10**6, resolution=0.0)
    assert found.chosen.n == 137 and found.chosen.rate == 0.9
    assert found.below is not None and found.below.n == 136
    assert len(calls) == len(set(calls))  # every N evaluated once


def test_search_resolution_and_cap():
    found = ks.search_n(_step(1000, []), 10, 0.8, 10**6, resolution=0.05)
    # stops once the bracket is within 5 % of N: the chosen N is at most 5 % too high
    assert 1000 <= found.chosen.n <= 1050 and found.below.n < 1000
    with pytest.raises(SystemExit):
        ks.search_n(_step(10**9, []), 10, 0.8, 4096, resolution=0.05)


@pytest.fixture(scope="module")
def world():
    return world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))


def test_oracle_statistic_reads_the_joint_cells(world):
    oracle = ks.Oracle(world, "shared_uniform", 2)
    frame = simulate(world, 300, np.random.default_rng(3), groups=oracle.group)
    exact = oracle.statistic(frame)
    assert math.isfinite(exact)
    # the same log LR counted sample by sample from the laws (planning._group_law)
    laws = {}
    by_hand = 0.0
    for t1, t2, acc in frame[["t1", "t2", "first_accepted"]].itertuples(index=False):
        i = int(np.searchsorted(world.t1_tokens, t1))
        if i not in laws:
            p, q, law = _group_law(world, i, 2, "shared_uniform")
            laws[i] = (joint_cells(p, q), law.joint)
        null, alt = laws[i]
        col = int(np.flatnonzero(world.u_tokens[i] == t2)[0])
        cell = col if acc else null.size // 2 + col
        by_hand += math.log(alt[cell] / null[cell])
    assert exact == pytest.approx(by_hand, rel=1e-9, abs=1e-9)
    # a sample in a cell of exact probability 0 is fatal (inf); one the bug cannot make, -inf
    assert oracle.impossible.any()  # (p - q)+ = 0 wherever q >= p
    cell = int(np.flatnonzero(oracle.impossible)[0])
    row = int(np.searchsorted(oracle.base, cell, side="right") - 1)
    offset = cell - oracle.base[row]
    accepted = offset < oracle.half[row]
    col = offset if accepted else offset - oracle.half[row]
    token = int(world.u_tokens[row, col])
    odd = pd.DataFrame({"t1": [world.t1_tokens[row]], "t2": [token],
                        "first_accepted": [int(accepted)]})  # fmt: skip
    assert oracle.statistic(pd.concat([frame, odd])) == math.inf
