"""What a McNemar protocol can detect at its size (exact power; torch-free).

The accuracy drop a pair detects depends on how often the two groups disagree (the
discordance rate d: a regression of size delta needs d >= delta) and on the level each
pair is tested at. Planned conservatively at Bonferroni's alpha / m over the m deciding
pairs (Holm's first step, its strictest), one-sided for ``fail_on: worse``, at the
protocol's ``power``. For each d on a grid: the smallest drop detected with that power
(``paired.detectable_drop``), or none when even a candidate that loses every
discordant trial (drop = d) is not detected; and ``min_drop``: the smallest
discordance d at which a candidate that loses every discordant trial (its drop is d) is
detected: no regression smaller than about this can be seen at this size.
"""

from __future__ import annotations

from functools import cache

from specconform.kinds.mcnemar.paired import detectable_drop

DISCORDANCE_GRID: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def _level(protocol: dict) -> tuple[float, int]:
    verdict = protocol.get("verdict") or {}
    alpha = float(verdict.get("alpha", protocol["alpha"]))
    roles = protocol.get("decision_roles") or ["primary"]
    m = max(1, sum(p["role"] in roles for p in protocol["pairs"]))
    return alpha / m, m


def detectable(protocol: dict, trials: int) -> dict:
    level, m = _level(protocol)
    out = dict(
        _detectable(trials, level, m, float(protocol.get("power", 0.8)), protocol["fail_on"])
    )
    out["drop_by_discordance"] = dict(out["drop_by_discordance"])  # the cache's stays intact
    return out


@cache
def _detectable(trials: int, level: float, m: int, target: float, alternative: str) -> tuple:
    by_d = {
        f"{d:g}": detectable_drop(trials, d, level, target, alternative) for d in DISCORDANCE_GRID
    }
    # Pure losses (every discordant trial lost): the drop equals d; the smallest such d.
    lo, hi = 0.0, 1.0
    if detectable_drop(trials, hi, level, target, alternative) is None:
        min_drop = None
    else:
        for _ in range(30):
            mid = (lo + hi) / 2.0
            if detectable_drop(trials, mid, level, target, alternative) is None:
                lo = mid
            else:
                hi = mid
        min_drop = hi
    return (
        ("trials", trials),
        ("power", target),
        ("level", level),
        ("pairs", m),
        ("alternative", alternative),
        ("drop_by_discordance", by_d),
        ("min_drop", min_drop),
    )


def plan_json(protocol: dict) -> dict:
    trials = int(protocol["dataset"]["questions"]) * int(protocol["seeds"]["count"])
    return {
        **detectable(protocol, trials),
        "note": "exact power of the exact McNemar test from the binomial law of the "
        "discordant trials, at alpha / m per pair (Bonferroni: Holm's strictest step); "
        "drop_by_discordance[d]: the smallest accuracy drop detected when the groups "
        "disagree on a fraction d of the trials (null: not detectable at that d); "
        "min_drop: the smallest discordance at which a candidate losing every "
        "discordant trial (its accuracy drop equals the discordance) is detected",
    }


def plan_bytes(loaded, raw, evaluation) -> bytes:
    """results/plan.json of a run: the detectable accuracy drop at the protocol's size."""
    from specconform.evidence.jsonio import canonical_json_bytes

    return canonical_json_bytes(plan_json(loaded.data))
