"""Pre-run power check: do the given seeds give every deciding test the protocol's stated
power (issue 32, part 3)?

A distribution protocol may state a power target (``power: {target: 0.8, tv: 0.05}``,
specconform.protocol.schema.PowerTarget): at its seeds each deciding test detects a bias
of total variation ``tv`` in every deciding stratum with probability ``target``. The
power is the planner's (:mod:`specconform.planning.detectable`, `specconform plan`): the
least favourable bias of that TV on the test's final cells, asymptotic noncentral χ²
at the level the verdict rule implies (α/m for Holm over m deciding tests). `run` and
`gate` call :func:`check_power_plan` after the evidence check (planning.evidence), before
any model is read or built; a deciding test below the target refuses the run (one line
naming the test, its power and the seeds it needs, exit 2) unless the caller passes
``--allow-inconclusive`` (then the same line is a note).

Where the power comes from, never guessed:

- **cached laws**: the reference laws `specconform plan` replayed for this protocol
  and engine (specconform.planning.law_cache, keyed by the protocol's hash, the engine
  block, the draft depths, the engine's code and the torch version, read here without
  importing torch). The power and the seeds needed are then the planner's own figures.
- **law-free bound**, without cached laws: whatever the laws, a χ² test has df >= 1 and
  its noncentrality at TV x is at most c N x² (c = 4 for a goodness-of-fit test, whose
  strata hold at most the group's N samples; 2 for a two-sample test on disjoint seed
  sets and 1 on shared seeds split even/odd). The χ² power falls with df and rises with
  the noncentrality, so chi2_power(1, c N x², level) bounds the planned power from
  above: below the target, the shortfall is certain; the seeds it needs are then a lower
  bound. Above it nothing is known, and the test is reported "not checked".
- acceptance (a rate shift scaled by the unknown rejection rates) and joint_score (its
  weight is the laws' own) have no law-free bound: without cached laws they are "not
  checked", said in one line.

Sequential runs are not checked (the e-process's power is not this fixed-N plan).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from specconform.calibration import deciding_tests, world_from_reference
from specconform.planning.detectable import PLANNED_TYPES, plan_tests, planning_level, seeds_needed
from specconform.protocol.schema import PowerTarget
from specconform.stats.power import chi2_power, required_noncentrality
from specconform.util.errors import UsageError

# Law-free bound on a χ² test's noncentrality per seed per unit TV² (module docstring).
_GOF = ("t1_gof", "t2_gof", "joint", "t3_gof")


@dataclass(frozen=True)
class PowerShortfall:
    """A deciding test whose planned power at ``seeds`` is below the protocol's target."""

    test: str
    seeds: int
    power: float  # the planned power at tv; an upper bound when law_free
    target: float
    tv: float
    needed: float  # seeds per group that reach the target; a lower bound when law_free
    law_free: bool

    def line(self) -> str:
        at_most = "at most " if self.law_free else ""
        src = (
            "law-free bound: df >= 1, every sample in its strata"
            if self.law_free
            else "planned from the cached reference laws"
        )
        need = (
            "no seed count reaches it"
            if math.isinf(self.needed)
            else f"needs {'at least ' if self.law_free else ''}{int(self.needed):,} seeds per group"
        )
        return (
            f"deciding test {self.test} has power {at_most}{self.power:.3f} against TV "
            f"{self.tv:g} at {self.seeds:,} seeds per group, below the protocol's target "
            f"{self.target:g} ({src}): {need}"
        )


@dataclass(frozen=True)
class PowerCheck:
    """What the check found: the shortfalls, the deciding tests whose power reached the
    target, and those it could not check (no cached laws, no law-free bound)."""

    shortfalls: tuple[PowerShortfall, ...]
    reached: tuple[str, ...]
    unchecked: tuple[str, ...]
    laws: str | None  # the cache entry the power came from; None: law-free only

    def note(self, seeds: int, target: float, tv: float) -> str:
        """One line for the user when nothing is refused."""
        parts = []
        if self.reached:
            src = f"cached laws {self.laws}" if self.laws else "law-free bound"
            parts.append(
                f"{len(self.reached)} deciding test(s) reach power {target:g} against TV "
                f"{tv:g} at {seeds:,} seeds per group ({src})"
            )
        if self.unchecked:
            parts.append(
                f"not checked for {', '.join(self.unchecked)} (no cached reference laws "
                "for this protocol and engine, and no law-free bound decides it: "
                "`specconform plan PROTOCOL` caches the laws)"
            )
        return "power: " + "; ".join(parts)


def law_free_bound(
    spec: dict, protocol: dict, seeds: int, tv: float, level: float, target: float
) -> tuple[float, float] | None:
    """(upper bound on the planned power at ``seeds``, lower bound on the seeds that
    reach ``target``) of one test whatever the laws; None when there is no such bound."""
    kind = spec["type"]
    if kind in _GOF:
        c = 4.0
    elif kind == "t2_homogeneity":
        groups = {g["name"]: g for g in protocol["groups"]}
        shared = len({groups[g].get("seed_offset") or 0 for g in spec["groups"]}) == 1
        c = 1.0 if shared else 2.0  # 4 n_a n_b / (n_a + n_b), halves on shared seeds
    else:
        return None
    if kind == "t1_gof":  # Bonferroni's level inside (a lower bound on Simes' power)
        level = level / len(spec["groups"])
    power = chi2_power(1, c * seeds * tv * tv, level).power
    needed = math.ceil(required_noncentrality(1, level, target) / (c * tv * tv))
    return power, float(needed)


def power_check(
    protocol: dict, tv: float, target: float, reference: dict | None = None
) -> PowerCheck:
    """The check on validated protocol data at its ``seeds.count``: from ``reference``
    (reference.json-shaped laws) where given, else law-free (module docstring)."""
    seeds = int(protocol["seeds"]["count"])
    level, _ = planning_level(protocol)
    planned = [t for t in deciding_tests(protocol) if t["type"] in PLANNED_TYPES]
    # name -> (planned power at tv, seeds that reach the target, below the target?)
    by_laws: dict[str, tuple[float, float, bool]] = {}
    if reference is not None and planned:
        world = world_from_reference(reference)
        for p in plan_tests(protocol, world, seeds, target):
            if not p.deciding or (p.type == "t3_gof" and not world.p3.any()):
                continue  # laws without p_t3: t3 is left to the law-free bound
            if math.isinf(p.detectable_tv):
                by_laws[p.test] = (0.0, math.inf, True)  # no stratum expected: no power
                continue
            # λ scales with TV²: the planned λ at tv from the one at the detectable TV
            lam = required_noncentrality(p.df, p.level, target) * (tv / p.detectable_tv) ** 2
            short = p.detectable_tv > tv  # the planner's own criterion, no float power ties
            by_laws[p.test] = (chi2_power(p.df, lam, p.level).power, float(seeds), short)
        if any(short for *_, short in by_laws.values()):
            # only the deciding tests (their count sets the level): the rest cost time
            deciding = {t["name"] for t in deciding_tests(protocol)}
            only = {**protocol, "tests": [t for t in protocol["tests"] if t["name"] in deciding]}
            for s in seeds_needed(only, world, tv, target):
                if s.test in by_laws and by_laws[s.test][2]:
                    by_laws[s.test] = (by_laws[s.test][0], float(s.seeds), True)
    shortfalls, reached, unchecked = [], [], []
    for spec in planned:
        name = spec["name"]
        if name in by_laws:
            power, needed, short = by_laws[name]
            if short:
                shortfalls.append(PowerShortfall(name, seeds, power, target, tv, needed, False))
            else:
                reached.append(name)
            continue
        bound = law_free_bound(spec, protocol, seeds, tv, level, target)
        if bound is not None and bound[0] < target:
            shortfalls.append(PowerShortfall(name, seeds, bound[0], target, tv, bound[1], True))
        else:
            unchecked.append(name)
    return PowerCheck(tuple(shortfalls), tuple(reached), tuple(unchecked), None)


def cached_laws(loaded, warn: Callable[[str], None]) -> tuple[dict, str] | None:
    """(the laws `specconform plan` cached for this protocol and engine, the entry's path),
    or None. Torch is not imported: its version is read from the installed metadata.
    A protocol on CUDA also finds laws a CPU-only plan cached (its replay falls back to
    the CPU and keys the entry so)."""
    from importlib.metadata import PackageNotFoundError, version

    from specconform.planning import law_cache

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        return None
    spec = loaded.model.engine
    depths = sorted({g.draft_loops for g in loaded.model.groups if g.draft_loops})
    engines = [spec.model_dump(mode="json")]
    if spec.device == "cuda":
        engines.append(spec.model_copy(update={"device": "cpu"}).model_dump(mode="json"))
    for engine in engines:
        key = law_cache.law_key(loaded.hash, engine, depths, torch_version)
        laws = law_cache.load(key, warn)
        if laws is not None:
            return laws, str(law_cache.entry_path(key))
    return None


def check_power_plan(
    loaded, *, allow_inconclusive: bool, notify: Callable[[str], None]
) -> PowerCheck | None:
    """Refuse (UsageError, exit 2, one line) a run whose seeds give some deciding test
    less than the protocol's stated power, unless ``allow_inconclusive`` (then a note).
    Protocols without a ``power`` target pass unchecked and silent (None)."""
    goal = getattr(loaded.model, "power", None)
    # Only the distribution schema's power target (a McNemar protocol's `power` is the
    # level its detectable drop is stated at, a float: not a target to check here).
    if not isinstance(goal, PowerTarget):
        return None
    if getattr(loaded.model, "sequential", None) is not None:
        notify("power: not checked (a sequential run: the fixed-N plan does not apply)")
        return None
    found = cached_laws(loaded, notify)
    data = loaded.data
    check = power_check(data, goal.tv, goal.target, found[0] if found else None)
    if found is not None:
        check = PowerCheck(check.shortfalls, check.reached, check.unchecked, found[1])
    seeds = int(data["seeds"]["count"])
    if check.shortfalls:
        # the test that needs the most seeds first: its count is the one to ask for
        first = max(check.shortfalls, key=lambda s: s.needed)
        more = f" (and {len(check.shortfalls) - 1} more)" if len(check.shortfalls) > 1 else ""
        if not allow_inconclusive:
            raise UsageError(f"{first.line()}{more}: raise --seeds, or pass --allow-inconclusive")
        notify(f"note: {first.line()}{more}; running anyway (--allow-inconclusive)")
    elif check.reached or check.unchecked:
        notify(check.note(seeds, goal.target, goal.tv))
    return check
