"""Power against planted bugs from their exact laws (specconform.stats.mutant_laws):
each planned test's noncentral-χ² power at a protocol's size, the out-of-support row's
exact probability, and the 1-df oracle's seeds (bench/kill_matrix.py). Split from
:mod:`specconform.planning`, which re-exports these names. Numpy/scipy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specconform.calibration import World, deciding_tests, world_from_reference
from specconform.stats.pooling import pool_cells
from specconform.stats.power import DEFAULT_POWER, chi2_power, required_noncentrality
from specconform.stats.speculative import joint_cells, total_variation

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
    from specconform.planning.detectable import PLANNED_TYPES, _rows, planning_level
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
            from specconform.planning.score import score_mutant_noncentrality

            g = groups[names[0]]
            bug = _mutant_for(mutant, g["mode"])
            d = g.get("draft_loops")
            lam, df, oos_p = score_mutant_noncentrality(
                w,
                seeds,
                d,
                lambda i, d=d, bug=bug, mode=g["mode"]: _group_law(w, i, d, bug, mode)[2],
            )
            out.append(_combined(spec, deciding, seeds, df, lam, oos_p, level, mutant))
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
        out.append(_combined(spec, deciding, seeds, df, lam, oos_p, level, mutant))
    return out


def _combined(spec: dict, deciding: set, seeds, df, lam, oos, level, mutant) -> MutantPower:
    """A test's χ² power at (df, lam) combined with its out-of-support probability."""
    chi = chi2_power(df, lam, level).power if df >= 1 else 0.0
    power = 1 - (1 - oos) * (1 - chi)
    return MutantPower(
        spec["name"], spec["name"] in deciding, seeds, df, lam, oos, power, mutant is not None
    )


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
