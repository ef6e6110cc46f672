"""Sample-size planning for distribution protocols: the TV each test detects at N seeds
per group, or the seeds it needs to detect a TV x, at power 0.99 (default).

Effect: a bias of TV x in *every* deciding stratum, in the least favourable direction
on the test's final cells (after the protocol's fixed pooling rule at the expected
stratum size). For χ² tests the power at noncentrality λ = 4 n x² (n = samples, or
n_a n_b / (n_a + n_b) for two samples, summed over strata) is a lower bound for every
alternative at that TV (:mod:`specconform.stats.power`); for acceptance (a rate per
stratum, TV of a Bernoulli law = the rate shift δ) λ = Σ n_s δ² / (r_s (1 − r_s)) exactly,
r_s = TV(p, q) the stratum's exact rejection rate.

Strata: a stratum enters when its *expected* size N · P(stratum) reaches the protocol's
min_samples (the realised set varies from run to run around it). Level: the per-test
level the verdict rule implies: α for the current rule (each deciding test at α: the
verdict's false-fail rate is only union-bounded by m α); α / m for Holm or Bonferroni
over m deciding tests (exact for Bonferroni, conservative for Holm); a multi-group t1
test is Bonferroni over its groups inside that. The χ² law of the statistic is
asymptotic; docs/kill-matrix.md checks it against replications.

Numpy/scipy only; exact laws from a reference.json (no torch) or, in the CLI, a replay
through the bundled engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from specconform.calibration import World, deciding_tests, world_from_reference
from specconform.kinds.verdict import FamilyRule
from specconform.stats.pooling import pool_cells
from specconform.stats.power import DEFAULT_POWER, chi2_power, required_noncentrality
from specconform.stats.speculative import joint_cells, total_variation

PLANNED_TYPES = (
    "t1_gof",
    "t2_gof",
    "t2_homogeneity",
    "acceptance",
    "joint",
    "joint_score",
    "t3_gof",
)


@dataclass(frozen=True)
class StratumPlan:
    key: str  # "t1=123" (or "t1=1,t2=2"; "all" for a t1 test)
    n: float  # expected samples (per group; each side for two samples)
    df: int  # final cells - 1 after pooling at the expected size
    weight: float  # this stratum's noncentrality per unit x² (4 n_eff, or n/(r(1-r)))


@dataclass(frozen=True)
class TestPlan:
    """One test's plan at ``seeds`` per group. ``detectable_tv``: the smallest TV per
    deciding stratum detected with ``power`` at ``level``; inf without evidence (no
    stratum expected to reach min_samples, or df 0)."""

    __test__ = False  # not a pytest class

    test: str
    type: str
    role: str
    deciding: bool
    level: float
    seeds: int
    df: int
    strata: tuple[StratumPlan, ...]
    detectable_tv: float
    power: float
    note: str

    def to_json(self) -> dict:
        """Plain JSON for an archive (non-finite numbers as None)."""

        def num(x):
            return float(x) if math.isfinite(x) else None

        return {
            "test": self.test,
            "type": self.type,
            "role": self.role,
            "deciding": self.deciding,
            "level": self.level,
            "seeds": self.seeds,
            "df": self.df,
            "detectable_tv": num(self.detectable_tv),
            "power": num(self.power),
            "note": self.note,
            "strata": [{"key": s.key, "n": s.n, "df": s.df} for s in self.strata],
        }

    @property
    def n_per_stratum(self) -> tuple[float, float]:
        ns = [s.n for s in self.strata]
        return (min(ns), max(ns)) if ns else (0.0, 0.0)


@dataclass(frozen=True)
class SeedsNeeded:
    test: str
    role: str
    deciding: bool
    tv: float
    seeds: float  # inf: not reachable (e.g. a t1 law whose strata never form)
    plan: TestPlan | None


def planning_level(protocol: dict) -> tuple[float, str]:
    """Per-test level implied by the protocol's verdict rule, and how it was derived."""
    alpha = float(protocol["alpha"])
    m = len(deciding_tests(protocol))
    block = protocol.get("verdict") if isinstance(protocol.get("verdict"), dict) else {}
    rule = str(block.get("rule") or block.get("method") or block.get("combine") or "").lower()
    if rule in ("holm", "bonferroni"):
        # The family's level: the stated alpha less the numerics reserve.
        fam = FamilyRule.from_protocol(protocol, ()).level
        return fam / m, (
            f"{rule.capitalize()} over {m} deciding tests at family-wise "
            f"alpha {fam:g}: planned at alpha/m = {fam / m:.4g}"
            + (" (conservative for Holm)" if rule == "holm" else "")
        )
    return alpha, (
        f"each deciding test at alpha = {alpha:g} (verdict false-fail rate only "
        f"union-bounded by {m} x {alpha:g})"
    )


def plan_tests(
    protocol: dict, reference: dict | World, seeds: int, power: float = DEFAULT_POWER
) -> list[TestPlan]:
    """Detectable TV of every planned test (deciding, secondary, mechanism; exploratory
    t3 too when the reference has its laws) at ``seeds`` per group."""
    world, level, planned = _planned(protocol, reference)
    return [
        _plan_one(protocol, world, spec, int(seeds), level, power, is_d) for spec, is_d in planned
    ]


def _planned(protocol: dict, reference: dict | World):
    """(the reference world, the planning level, [(spec, deciding)] of the planned tests)."""
    world = reference if isinstance(reference, World) else world_from_reference(reference)
    level, _ = planning_level(protocol)
    deciding = {t["name"] for t in deciding_tests(protocol)}
    planned = [
        (spec, spec["name"] in deciding)
        for spec in protocol["tests"]
        if spec["type"] in PLANNED_TYPES
    ]
    return world, level, planned


def detectable_tv_for_run(protocol: dict, reference: dict, seeds: int) -> list[TestPlan]:
    """What an archive states: the detectable TV of each *deciding* test at its seeds."""
    return [p for p in plan_tests(protocol, reference, seeds) if p.deciding]


def seeds_needed(
    protocol: dict,
    reference: dict | World,
    tv: float,
    power: float = DEFAULT_POWER,
    max_seeds: int = 10**9,
) -> list[SeedsNeeded]:
    """Smallest seeds per group at which each test detects a TV ``tv`` with ``power``
    (bisection on N; strata and pooling are recomputed at every N)."""
    if not 0 < tv <= 1:
        raise ValueError(f"--tv must lie in (0, 1], got {tv}")
    world, level, planned = _planned(protocol, reference)
    out = []
    for spec, is_d in planned:

        def ok(n, spec=spec, is_d=is_d):
            p = _plan_one(protocol, world, spec, n, level, power, is_d)
            return p.detectable_tv <= tv, p

        lo, hi = 1, 2
        while not ok(hi)[0] and hi < max_seeds:
            lo, hi = hi, hi * 2
        if not ok(hi)[0]:
            out.append(SeedsNeeded(spec["name"], spec["role"], is_d, tv, math.inf, None))
            continue
        while hi - lo > 1:  # first N that detects (monotone up to stratum-entry jumps)
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid)[0] else (mid, hi)
        out.append(SeedsNeeded(spec["name"], spec["role"], is_d, tv, hi, ok(hi)[1]))
    return out


# --- one test --------------------------------------------------------------------------------


def _plan_one(
    protocol, w: World, spec, n: int, level: float, power: float, deciding: bool
) -> TestPlan:
    rule = protocol.get("strata") or {}
    min_samples = int(rule.get("min_samples", 200))
    min_expected = float(rule.get("min_expected", 5.0))
    groups = {g["name"]: g for g in protocol["groups"]}
    kind, level_t, note = spec["type"], level, ""
    strata: list[StratumPlan] = []
    if kind == "t1_gof":
        m = len(spec["groups"])
        level_t = level / m
        how = "Simes" if spec.get("combine") == "simes" else "Bonferroni"
        # Simes rejects whenever Bonferroni does: planning at level / m bounds its power
        # from below (equal for a bug in one group, higher when the groups agree).
        note = f"{how} over {m} groups: each at {level_t:.3g}" if m > 1 else ""
        if m > 1 and how == "Simes":
            note += " (Bonferroni's level: a lower bound on Simes' power)"
        strata.append(_gof_stratum("all", n, w.p1, min_expected))
    elif kind in ("t2_gof", "acceptance", "joint"):
        d = groups[spec["groups"][0]].get("draft_loops")
        for i in _rows(w, n, min_samples):
            n_s, key = n * w.p1[i], f"t1={w.t1_tokens[i]}"
            if kind == "t2_gof":
                strata.append(_gof_stratum(key, n_s, w.p2[i], min_expected))
            elif kind == "joint":
                strata.append(
                    _gof_stratum(key, n_s, joint_cells(w.p2[i], w.q2[d][i]), min_expected)
                )
            else:
                r = total_variation(w.p2[i], w.q2[d][i])
                pooling = pool_cells(n_s * np.array([1 - r, r]), min_expected)
                df = max(pooling.cells - 1, 0)
                strata.append(StratumPlan(key, n_s, df, n_s / (r * (1 - r)) if df else 0.0))
        if kind == "acceptance":
            note = "rate shift delta per stratum (TV of the accept/reject law)"
    elif kind == "t2_homogeneity":
        a, b = (groups[g] for g in spec["groups"])
        shared = (a.get("seed_offset") or 0) == (b.get("seed_offset") or 0)
        half = 0.5 if shared else 1.0  # shared seeds: even/odd split halves each side
        note = "seed sets overlap: even/odd halves" if shared else ""
        for i in _rows(w, n * half, min_samples):
            n_s = n * half * w.p1[i]
            pooling = pool_cells(n_s * w.p2[i], min_expected)  # min(n_a, n_b) x pooled law
            df = max(pooling.cells - 1, 0)
            strata.append(StratumPlan(f"t1={w.t1_tokens[i]}", n_s, df, 4 * n_s / 2 if df else 0.0))
    elif kind == "joint_score":
        return _plan_score(w, spec, groups, n, level_t, power, deciding)
    elif kind == "t3_gof":
        for i in range(w.t1_tokens.size):
            for c in range(w.u_tokens.shape[1]):
                n_s = n * w.p1[i] * w.p2[i, c]
                if n_s >= min_samples and w.p3[i, c].sum() > 0:
                    strata.append(
                        _gof_stratum(
                            f"t1={w.t1_tokens[i]},t2={w.u_tokens[i, c]}",
                            n_s,
                            w.p3[i, c],
                            min_expected,
                        )
                    )
        note = "strata with a p_t3 law in the reference only"
    df = sum(s.df for s in strata)
    weight = sum(s.weight for s in strata)
    plan = partial(_test_plan, spec, kind, deciding, level_t, n)
    if kind == "t3_gof" and not w.p3.any():
        return plan(0, (), math.inf, math.nan, "not planned: the reference has no p_t3 laws")
    if df < 1 or weight <= 0:
        why = (
            "no evidence: no stratum expected to reach min_samples"
            if not strata
            else "no evidence: every stratum pools to one cell"
        )
        return plan(df, strata, math.inf, math.nan, why)
    req = required_noncentrality(df, level_t, power)
    tv = math.sqrt(req / weight)
    achieved = chi2_power(df, weight * tv**2, level_t).power
    return plan(df, strata, tv, achieved, note)


def _plan_score(w: World, spec, groups, n: int, level: float, power: float, deciding: bool):
    """joint_score: the TV detected along the least detectable pre-registered direction
    (none against a bias orthogonal to them: that is the omnibus tests' job)."""
    from specconform.planning.score import detectable_tv as score_tv
    from specconform.planning.score import score_detectable_weight

    d = groups[spec["groups"][0]].get("draft_loops")
    weight, df = score_detectable_weight(w, n, d)
    strata = tuple(
        StratumPlan(f"t1={w.t1_tokens[i]}", n * float(w.p1[i]), df, 0.0)
        for i in range(w.t1_tokens.size)
    )
    plan = partial(_test_plan, spec, "joint_score", deciding, level, n)
    if df < 1:
        return plan(0, strata, math.inf, math.nan, "no evidence: no direction moves a cell")
    tv = score_tv(weight, df, required_noncentrality(df, level, power))
    achieved = chi2_power(df, weight * tv**2, level).power
    return plan(
        df,
        strata,
        tv,
        achieved,
        "along its least detectable bug-class direction only (every stratum)",
    )


def _test_plan(spec, kind, deciding, level, n, df, strata, tv, achieved, note) -> TestPlan:
    """One test's plan: its name and role from the protocol, the rest as computed."""
    return TestPlan(
        spec["name"], kind, spec["role"], deciding, level, n, df, tuple(strata), tv, achieved, note
    )


def _rows(w: World, n: float, min_samples: int) -> list[int]:
    """t1 rows whose expected stratum size n · p1 reaches min_samples."""
    return [i for i in range(w.t1_tokens.size) if n * w.p1[i] >= min_samples]


def _gof_stratum(key: str, n_s: float, law: np.ndarray, min_expected: float) -> StratumPlan:
    law = np.asarray(law, dtype=np.float64)
    pooling = pool_cells(n_s * law / law.sum(), min_expected)
    df = max(pooling.cells - 1, 0)
    return StratumPlan(key, float(n_s), df, 4.0 * n_s if df else 0.0)
