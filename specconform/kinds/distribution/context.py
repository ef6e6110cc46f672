"""The frozen evaluation context of a distribution protocol: the pre-registered
parameters read once from the protocol, the parsed reference and the samples per group,
reduced to counts (:mod:`.tally`: the streamed reduction of issue 38).

:class:`SeedView` is the per-seed view (diagnosis and `replay` name offenders by seed).

``samples`` columns (raw/samples.csv): group, seed, t1, t2, t3, first_accepted, drafted,
accepted (-1 = not generated / no draft) and finish_reason ("length" | "stop" | "error" |
"abort"; absent in synthetic frames that predate it: then engine errors are not
counted and the engine_errors row says "no evidence").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from specconform.details import Record
from specconform.kinds.verdict import FamilyRule, stochastic_row
from specconform.results import TestRow
from specconform.stats.reference import Reference

from .tally import GroupTally, clamp_tokens

DECIDING_ROLES = ("prerequisite", "primary")
COLUMNS = ("seed", "t1", "t2", "t3", "first_accepted", "drafted", "accepted")


# A stochastic row without evidence: its reason, and its detail's ``no_evidence``.
_NONE = (
    "no evidence",
    "no stratum reached the strata threshold, or every cell pooled into one (df 0)",
)


@dataclass(frozen=True)
class GroupData:
    """One group's samples sorted by seed, per seed (:class:`SeedView`); every array [N]
    int64 (error [N] bool)."""

    seed: np.ndarray
    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    first_accepted: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    error: np.ndarray | None = None  # finish_reason == "error"; None: not recorded


@dataclass(frozen=True)
class GroupPlan:
    name: str
    mode: str
    draft_loops: int | None
    seed_start: int | None  # first seed of the group (offset + seed_offset); None: unknown


def family_size(protocol: dict, rule: FamilyRule) -> int:
    """Deciding tests the protocol lists: Holm's m at its first step."""
    return max(1, sum(t["role"] in rule.roles for t in protocol["tests"]))


@dataclass(frozen=True)
class Context:
    alpha: float  # per-test level of the rows that do not decide
    min_samples: int
    min_expected: float
    batch_size: int | None
    error_tolerance: int
    rule: FamilyRule
    plans: Mapping[str, GroupPlan]
    ref: Reference
    data: Mapping[str, GroupTally]
    family_size: int = 1  # deciding tests the protocol lists (Holm's m at its first step)

    @property
    def width(self) -> int:
        """Base of int64 (t1, t2[, t3]) codes: tokens lie in [0, vocab_size] after split."""
        return self.ref.vocab_size + 1

    @classmethod
    def build(cls, protocol: dict, data: Mapping[str, GroupTally], ref: Reference) -> Context:
        """``data``: per-group tallies (:func:`.tally.tally_csv` or :func:`.tally.tally_frame`)."""
        strata_rule = protocol.get("strata") or {}
        batch = (protocol.get("engine") or {}).get("batch_size")
        tolerance = (protocol.get("engine_errors") or {}).get("tolerance", 0)
        rule = FamilyRule.from_protocol(protocol, DECIDING_ROLES)
        return cls(
            alpha=float(protocol["alpha"]),
            min_samples=int(strata_rule.get("min_samples", 200)),
            min_expected=float(strata_rule.get("min_expected", 5.0)),
            batch_size=None if batch is None else int(batch),
            error_tolerance=int(tolerance),
            rule=rule,
            plans=group_plans(protocol),
            ref=ref,
            data=MappingProxyType(dict(data)),
            family_size=family_size(protocol, rule),
        )

    def group(self, name: str) -> GroupTally:
        if name not in self.plans:
            raise ValueError(f"test names unknown group {name!r}")
        return self.data.get(name, GroupTally.empty())

    def row(
        self, spec: dict, statistic, df, pvalue, n: int, detail: Record, method: str
    ) -> TestRow:
        """A row at the per-test level; :func:`family_verdict` re-decides deciding rows.
        NaN/None p-value or n 0: no evidence (never a pass)."""
        return stochastic_row(spec, statistic, df, pvalue, n, self.alpha, detail, method, *_NONE)


def group_plans(protocol: dict) -> Mapping[str, GroupPlan]:
    offset = (protocol.get("seeds") or {}).get("offset")
    plans = {
        g["name"]: GroupPlan(
            g["name"],
            g["mode"],
            g.get("draft_loops"),
            None if offset is None else int(offset) + int(g.get("seed_offset", 0)),
        )
        for g in protocol["groups"]
    }
    return MappingProxyType(plans)


@dataclass(frozen=True)
class SeedView:
    """The samples per seed (not counts): which seed drew an offender or ended in an
    engine error. For the diagnosis and `replay` of one archive, not for evaluation."""

    plans: Mapping[str, GroupPlan]
    ref: Reference
    data: Mapping[str, GroupData]

    @classmethod
    def build(cls, protocol: dict, samples, ref: Reference) -> SeedView:
        return cls(group_plans(protocol), ref, MappingProxyType(split(samples, ref.vocab_size)))


def split(samples, vocab_size: int) -> dict[str, GroupData]:
    """Per-group int64 columns, sorted by seed; tokens clamped (:func:`.tally.clamp_tokens`)."""
    out = {}
    for name, frame in samples.groupby("group", sort=True):
        frame = frame.sort_values("seed", kind="stable")
        cols = [frame[c].to_numpy(dtype=np.int64) for c in COLUMNS]
        for k in (1, 2, 3):  # t1, t2, t3
            cols[k] = clamp_tokens(cols[k], vocab_size)
        error = None
        if "finish_reason" in frame.columns:
            error = (frame["finish_reason"].astype(str) == "error").to_numpy()
        out[str(name)] = GroupData(*cols, error=error)
    return out
