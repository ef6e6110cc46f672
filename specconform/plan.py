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

import numpy as np

from specconform.calibration import World, deciding_tests, world_from_reference
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
        fam = float(block.get("alpha", alpha))
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
    world = reference if isinstance(reference, World) else world_from_reference(reference)
    level, _ = planning_level(protocol)
    deciding = {t["name"] for t in deciding_tests(protocol)}
    out = []
    for spec in protocol["tests"]:
        if spec["type"] not in PLANNED_TYPES:
            continue
        out.append(
            _plan_one(protocol, world, spec, int(seeds), level, power, spec["name"] in deciding)
        )
    return out


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
    world = reference if isinstance(reference, World) else world_from_reference(reference)
    level, _ = planning_level(protocol)
    deciding = {t["name"] for t in deciding_tests(protocol)}
    out = []
    for spec in protocol["tests"]:
        if spec["type"] not in PLANNED_TYPES:
            continue
        is_d = spec["name"] in deciding

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
        note = f"Bonferroni over {m} groups: each at {level_t:.3g}" if m > 1 else ""
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
    if kind == "t3_gof" and not w.p3.any():
        return TestPlan(
            spec["name"],
            kind,
            spec["role"],
            deciding,
            level_t,
            n,
            0,
            (),
            math.inf,
            math.nan,
            "not planned: the reference has no p_t3 laws",
        )
    if df < 1 or weight <= 0:
        return TestPlan(
            spec["name"],
            kind,
            spec["role"],
            deciding,
            level_t,
            n,
            df,
            tuple(strata),
            math.inf,
            math.nan,
            "no evidence: no stratum expected to reach min_samples"
            if not strata
            else "no evidence: every stratum pools to one cell",
        )
    req = required_noncentrality(df, level_t, power)
    tv = math.sqrt(req / weight)
    achieved = chi2_power(df, weight * tv**2, level_t).power
    return TestPlan(
        spec["name"],
        kind,
        spec["role"],
        deciding,
        level_t,
        n,
        df,
        tuple(strata),
        tv,
        achieved,
        note,
    )


def _plan_score(w: World, spec, groups, n: int, level: float, power: float, deciding: bool):
    """joint_score: the TV detected along the least detectable pre-registered direction
    (none against a bias orthogonal to them: that is the omnibus tests' job)."""
    from specconform.plan_score import detectable_tv as score_tv
    from specconform.plan_score import score_detectable_weight

    d = groups[spec["groups"][0]].get("draft_loops")
    weight, df = score_detectable_weight(w, n, d)
    strata = tuple(
        StratumPlan(f"t1={w.t1_tokens[i]}", n * float(w.p1[i]), df, 0.0)
        for i in range(w.t1_tokens.size)
    )
    if df < 1:
        return TestPlan(
            spec["name"],
            "joint_score",
            spec["role"],
            deciding,
            level,
            n,
            0,
            strata,
            math.inf,
            math.nan,
            "no evidence: no direction moves a cell",
        )
    tv = score_tv(weight, df, required_noncentrality(df, level, power))
    return TestPlan(
        spec["name"],
        "joint_score",
        spec["role"],
        deciding,
        level,
        n,
        df,
        strata,
        tv,
        chi2_power(df, weight * tv**2, level).power,
        "along its least detectable bug-class direction only (every stratum)",
    )


def _rows(w: World, n: float, min_samples: int) -> list[int]:
    """t1 rows whose expected stratum size n · p1 reaches min_samples."""
    return [i for i in range(w.t1_tokens.size) if n * w.p1[i] >= min_samples]


def _gof_stratum(key: str, n_s: float, law: np.ndarray, min_expected: float) -> StratumPlan:
    law = np.asarray(law, dtype=np.float64)
    pooling = pool_cells(n_s * law / law.sum(), min_expected)
    df = max(pooling.cells - 1, 0)
    return StratumPlan(key, float(n_s), df, 4.0 * n_s if df else 0.0)


# --- power against a planted bug (exact first-position laws) ---------------------------------


@dataclass(frozen=True)
class MutantPower:
    """Predicted power of one test against a bug at ``seeds`` per group: noncentral χ² at
    ``noncentrality`` on ``df``, combined with the probability ``out_of_support`` that
    some sample lands where the null law is 0 (fatal), as 1 − (1 − oos)(1 − power_χ²)."""

    test: str
    deciding: bool
    seeds: int
    df: int
    noncentrality: float
    out_of_support: float
    power: float
    exact: bool  # False: the test's input is untouched by the bug (power = its size)


def mutant_power(
    protocol: dict,
    reference: dict | World,
    mutant: str | None,
    seeds: int,
) -> list[MutantPower]:
    """Power of every planned t1/t2/acceptance/joint test against ``mutant`` (an exact
    law of :mod:`specconform.stats.mutant_laws`; speculative groups only)."""
    from specconform.stats.power import homogeneity_noncentrality

    w = reference if isinstance(reference, World) else world_from_reference(reference)
    level, _ = planning_level(protocol)
    rule = protocol.get("strata") or {}
    min_samples = int(rule.get("min_samples", 200))
    min_expected = float(rule.get("min_expected", 5.0))
    groups = {g["name"]: g for g in protocol["groups"]}
    deciding = {t["name"] for t in deciding_tests(protocol)}
    out = []
    for spec in protocol["tests"]:
        kind = spec["type"]
        if kind not in PLANNED_TYPES or kind == "t3_gof":
            continue
        names = spec["groups"]
        if kind == "t1_gof":  # the bugs act after t1: the test sees the exact law
            out.append(
                MutantPower(
                    spec["name"], spec["name"] in deciding, seeds, 0, 0.0, 0.0, level, False
                )
            )
            continue
        if kind == "joint_score":
            from specconform.plan_score import score_mutant_noncentrality

            g = groups[names[0]]
            bug = _mutant_for(mutant, g["mode"])
            d = g.get("draft_loops")
            lam, df, oos_p = score_mutant_noncentrality(
                w,
                seeds,
                d,
                lambda i, d=d, bug=bug, mode=g["mode"]: _group_law(w, i, d, bug, mode)[2],
            )
            chi = chi2_power(df, lam, level).power if df >= 1 else 0.0
            out.append(
                MutantPower(
                    spec["name"],
                    spec["name"] in deciding,
                    seeds,
                    df,
                    lam,
                    oos_p,
                    1 - (1 - oos_p) * (1 - chi),
                    mutant is not None,
                )
            )
            continue
        shared = (
            kind == "t2_homogeneity"
            and len({groups[g].get("seed_offset") or 0 for g in names}) == 1
        )
        n_g = seeds * (0.5 if shared else 1.0)
        df, lam, log_clean = 0, 0.0, 0.0
        for i in _rows(w, n_g, min_samples):
            n_s = n_g * w.p1[i]
            laws = [
                _group_law(
                    w, i, groups[g].get("draft_loops"), _mutant_for(mutant, groups[g]["mode"])
                )
                for g in names
            ]
            p, q, law = laws[0]
            if kind == "t2_gof":
                null, alt = p, law.committed
            elif kind == "joint":
                null, alt = joint_cells(p, q), law.joint
            elif kind == "acceptance":
                r0 = total_variation(p, q)
                null, alt = np.array([1 - r0, r0]), np.array([1 - law.reject_rate, law.reject_rate])
            else:  # homogeneity of two groups' committed t2 laws
                a, b = law.committed, laws[1][2].committed
                size = max(a.size, b.size)  # one side may carry the outside cell
                a, b = np.pad(a, (0, size - a.size)), np.pad(b, (0, size - b.size))
                pooling = pool_cells(n_s * (a + b) / 2, min_expected)
                df += max(pooling.cells - 1, 0)
                if pooling.cells > 1:
                    lam += homogeneity_noncentrality(pooling.apply(a), pooling.apply(b), n_s, n_s)
                continue
            pooling = pool_cells(n_s * null / null.sum(), min_expected)
            df += max(pooling.cells - 1, 0)
            oos = float(alt[null <= 0].sum())
            log_clean += n_s * np.log1p(-min(oos, 1 - 1e-300))
            if pooling.cells > 1:
                pn, pa = pooling.apply(null), pooling.apply(alt)
                lam += n_s * float(np.sum((pa - pn) ** 2 / pn))
        oos_p = float(-np.expm1(log_clean))
        chi = chi2_power(df, lam, level).power if df >= 1 else 0.0
        out.append(
            MutantPower(
                spec["name"],
                spec["name"] in deciding,
                seeds,
                df,
                lam,
                oos_p,
                1 - (1 - oos_p) * (1 - chi),
                mutant is not None,
            )
        )
    return out


def _mutant_for(mutant: str | None, mode: str) -> str | None:
    """The mutant as a group of ``mode`` sees it (None where it does not act)."""
    from specconform.stats.mutant_laws import affects

    return mutant if mutant is not None and affects(mutant, mode) else None


def _group_law(w: World, i: int, d, mutant, mode: str | None = None):
    """(p [C], q [C], FirstPositionLaw) of t1 row i for a group at depth d (None: nospec,
    which commits p exactly whatever the mutant). A law with a cell outside the
    filtered supports (``target_default_params``) pads p and q with a zero cell there."""
    from specconform.stats.mutant_laws import NEEDS_RAW, FirstPositionLaw, first_position_law

    m = int((w.u_tokens[i] >= 0).sum())
    p = w.p2[i, :m]
    if d is None:
        return p, p, FirstPositionLaw(p / p.sum(), np.zeros(m))
    q = w.q2[d][i, :m]
    other = [e for e in w.q2 if e != d]
    q_other = w.q2[other[0]][i, :m] if other else None
    raw = raw_laws(w, i, d) if mutant in NEEDS_RAW else {}
    law = first_position_law(p, q, mutant, q_other=q_other, **raw)
    if law.committed.size == m + 1:
        p, q = np.append(p, 0.0), np.append(q, 0.0)
    return p, q, law


def raw_laws(w: World, i: int, d: int) -> dict:
    """The unfiltered softmaxes of t1 row i on its cells (the reference's ``raw`` block,
    bench/calibration_make_reference.py): p_raw [C + 1] (last: the mass outside the
    cells) and q_raw [C] at depth d."""
    raw = w.reference.get("raw")
    if not raw:
        raise ValueError(
            "the reference has no 'raw' block (unfiltered laws): write it with "
            "bench/calibration_make_reference.py"
        )
    t1 = str(int(w.t1_tokens[i]))
    toks = [str(int(t)) for t in w.u_tokens[i] if t >= 0]
    p_raw = np.array([raw["p_t2"][t1].get(t, 0.0) for t in toks])
    q_raw = np.array([raw["q_t2"][str(d)][t1].get(t, 0.0) for t in toks])
    return {"p_raw": np.append(p_raw, max(0.0, 1.0 - p_raw.sum())), "q_raw": q_raw}


def support_power(protocol: dict, reference: dict | World, mutant: str, seeds: int) -> float:
    """Exact probability that the out-of-support row fails (some observation of null
    probability 0, any group) at ``seeds`` per group: 1 − Π_g (1 − π_g)^N, π_g the
    per-seed probability of an impossible t2 (the bug's first-position law where p = 0)
    or t3 (:func:`specconform.stats.mutant_laws.t3_out_of_support`; ``target_default_params``
    draws t3 at a bonus position with the unfiltered law, like ``bonus_params``)."""
    w = reference if isinstance(reference, World) else world_from_reference(reference)
    log_clean = 0.0
    for g in protocol["groups"]:
        pi = sum(
            w.p1[i] * group_out_of_support(w, i, g.get("draft_loops"), g["mode"], mutant)
            for i in range(w.t1_tokens.size)
        )
        log_clean += seeds * math.log1p(-min(pi, 1 - 1e-300))
    return max(0.0, float(-math.expm1(log_clean)))


def group_out_of_support(w: World, i: int, d, mode: str, mutant: str) -> float:
    """π for t1 row i of one group (see :func:`support_power`)."""
    from specconform.stats.mutant_laws import affects, t3_out_of_support

    if d is None or not affects(mutant, mode):
        return 0.0
    p, q, law = _group_law(w, i, d, mutant, mode)
    bad_t2 = float(law.committed[p <= 0].sum())
    m = int((w.u_tokens[i] >= 0).sum())
    if mutant in ("bonus_params", "target_default_params"):
        mass = _t3_mass(w, i)
        committed = law.committed[:m] * (p[:m] > 0)
        return bad_t2 + t3_out_of_support("bonus_params", committed, q[:m], t3_mass=mass)
    if mutant == "async_stale_input":
        return bad_t2 + t3_out_of_support("async_stale_input", p, q, t3_miss=_t3_miss(w, i))
    return bad_t2


def _t3_mass(w: World, i: int) -> np.ndarray:
    """[C] the unfiltered target mass on supp p(t3 | t1, t2) (1 where t2 has no t3 law)."""
    raw = (w.reference.get("raw") or {}).get("p_t3_mass")
    if raw is None:
        raise ValueError("the reference has no raw p_t3_mass: bench/calibration_make_reference.py")
    t1 = int(w.t1_tokens[i])
    return np.array([raw.get(f"{t1},{int(t)}", 1.0) for t in w.u_tokens[i] if t >= 0])


def t3_laws(w: World, i: int) -> list[dict]:
    """p(t3 | t1, x) for every cell x of t1 row i, draft-only tokens included ({} where
    the reference has no law)."""
    ref, t1 = w.reference, int(w.t1_tokens[i])
    off = (ref.get("raw") or {}).get("p_t3_off")
    if off is None:
        raise ValueError("the reference has no raw p_t3_off: bench/calibration_make_reference.py")
    out = []
    for t in w.u_tokens[i]:
        if t >= 0:
            key = f"{t1},{int(t)}"
            out.append(ref["p_t3"].get(key) or off.get(key) or {})
    return out


def _t3_miss(w: World, i: int) -> np.ndarray:
    """[C, C]: P_{t3 ~ p(· | t1, x)}(t3 outside supp p(· | t1, y))."""
    laws = t3_laws(w, i)
    out = np.zeros((len(laws), len(laws)))
    for x, lx in enumerate(laws):
        for y, ly in enumerate(laws):
            if ly:
                out[x, y] = sum(float(v) for t, v in lx.items() if t not in ly)
    return out


def oracle_seeds(
    reference: dict | World, mutant: str, d: int, alpha: float, power: float = DEFAULT_POWER
) -> float:
    """Seeds for a 1-df noncentral-χ² oracle that sees the joint (accept/reject, t2) cells
    of every t1 stratum at depth d, unpooled: λ = N Σ_t1 p1 χ²(bug ‖ exact); with mass
    where the exact joint law is 0, the sooner of that and the first impossible sample."""
    w = reference if isinstance(reference, World) else world_from_reference(reference)
    per_seed, oos = 0.0, 0.0
    for i in range(w.t1_tokens.size):
        p, q, law = _group_law(w, i, d, mutant)
        null, alt = joint_cells(p, q), law.joint
        oos += w.p1[i] * float(alt[null <= 0].sum())
        keep = null > 0
        per_seed += w.p1[i] * float(np.sum((alt[keep] - null[keep]) ** 2 / null[keep]))
    n_chi = (
        math.ceil(required_noncentrality(1, alpha, power) / per_seed) if per_seed > 0 else math.inf
    )
    n_oos = math.ceil(math.log(1 - power) / math.log1p(-oos)) if oos > 0 else math.inf
    return float(min(n_chi, n_oos))
