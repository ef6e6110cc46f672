"""Pre-run evidence check: can the given seeds give every deciding test its evidence?

`run` and `gate` call :func:`check_evidence_plan` after the protocol is loaded and its
overrides applied, before any model is read or built: a deciding test that cannot have
evidence at these seeds would make the verdict INCONCLUSIVE (specconform.kinds.verdict),
so the run is refused (one line naming the test and the seeds it needs, exit 2) unless
the caller allows an inconclusive verdict (``--allow-inconclusive``).

What is checked is what holds whatever the engine's laws are (no law is known before a
model runs): a shortfall here is certain, never a guess. Per kind, through the kind
table's ``evidence_plan`` (a Ref; None: the kind has no such certain bound, nothing is
checked). For distribution protocols (:func:`distribution_shortfalls`):

- a t1 goodness-of-fit test needs ``2 * min_expected`` seeds per group: with fewer, the
  pooling rule (stats.pooling) leaves at most one cell, df 0, whatever the law;
- a stratified test (t2, t3, acceptance, joint) needs one stratum of
  ``min_samples`` samples, and a stratum never holds more samples than the group has
  seeds (a two-sample test on overlapping seed sets takes even seeds on one side, odd on
  the other: 2 * min_samples - 1 seeds at least): fewer seeds than
  that give no stratum, df 0, whatever the law;
- any sample of fewer than ``2 * min_expected`` draws pools into one cell (df 0), so a
  stratum needs ``max(min_samples, 2 * min_expected)`` samples.

The laws decide the rest (how many strata form and their power): `specconform plan`
states it from a replay or a reference, and INCONCLUSIVE reports it after the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specconform.kinds.registry import kind_of
from specconform.util.errors import UsageError

# Tests whose strata need min_samples samples (joint_score takes every t1 stratum: no
# law-free bound).
STRATIFIED = ("t2_gof", "t2_homogeneity", "acceptance", "joint", "t3_gof")


@dataclass(frozen=True)
class Shortfall:
    """A deciding test that cannot have evidence at ``seeds`` per group."""

    test: str
    seeds: int  # seeds per group given
    needed: int  # seeds per group below which it cannot have evidence
    why: str

    def line(self) -> str:
        return (
            f"deciding test {self.test} cannot have evidence at {self.seeds:,} seeds per "
            f"group ({self.why}): needs at least {self.needed:,}"
        )


def distribution_shortfalls(protocol: dict) -> tuple[Shortfall, ...]:
    """The deciding tests of a distribution protocol (JSON data) that cannot have
    evidence at its ``seeds.count`` per group, whatever the laws (module docstring)."""
    roles = tuple(protocol.get("decision_roles") or ("prerequisite", "primary"))
    rule = protocol.get("strata") or {}
    min_samples = int(rule.get("min_samples", 200))
    min_expected = float(rule.get("min_expected", 5.0))
    groups = {g["name"]: g for g in protocol["groups"]}
    n = int(protocol["seeds"]["count"])
    out = []
    for spec in protocol["tests"]:
        if spec["role"] not in roles:
            continue
        kind = spec["type"]
        if kind == "t1_gof":
            need = math.ceil(2 * min_expected)
            why = f"below 2 x min_expected {min_expected:g}, every t1 cell pools into one"
        elif kind in STRATIFIED:
            shared = (
                kind == "t2_homogeneity"
                and len({groups[g].get("seed_offset") or 0 for g in spec["groups"]}) == 1
            )
            # a stratum of fewer than 2 x min_expected samples pools into one cell too
            side = max(min_samples, math.ceil(2 * min_expected))
            need = 2 * side - 1 if shared else side
            why = (
                f"no stratum reaches {side} samples (strata.min_samples {min_samples}, "
                f"2 x min_expected {min_expected:g})"
                + (" on either even/odd half of the shared seeds" if shared else "")
            )
        else:
            continue
        if n < need:
            out.append(Shortfall(spec["name"], n, need, why))
    return tuple(out)


def check_evidence_plan(kind: str, protocol: dict, *, allow_inconclusive: bool) -> None:
    """Refuse (UsageError, exit 2, one line) a run whose seeds cannot give some deciding
    test its evidence, unless ``allow_inconclusive``. Kinds without an ``evidence_plan``
    in the kind table pass unchecked."""
    ref = kind_of(kind).evidence_plan
    if ref is None or allow_inconclusive:
        return
    shortfalls = ref.load()(protocol)
    if shortfalls:
        first = shortfalls[0]
        more = f" (and {len(shortfalls) - 1} more)" if len(shortfalls) > 1 else ""
        raise UsageError(
            f"{first.line()}{more}; the verdict would be INCONCLUSIVE: "
            "raise --seeds, or pass --allow-inconclusive"
        )
