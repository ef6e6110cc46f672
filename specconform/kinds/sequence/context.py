"""The frozen evaluation context of a sequence protocol: its pre-registered parameters
read once, and the run's requests and tokens (:mod:`.records`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.details import Record
from specconform.kinds.verdict import FamilyRule, stochastic_row
from specconform.results import TestRow

from .records import Requests, Tokens

DECIDING_ROLES = ("primary", "mechanism", "conformance")
PAIR_GRID = 4  # g of the g x g pair table: 16 cells, 12 df when every row is tested
MIN_EXPECTED = 5.0  # per cell of a pair row, per acceptance cell (Σ TV and Σ (1 - TV))
STOCHASTIC_APPLIES = {  # group modes each stochastic type reads when it names no group
    "pit_uniformity": ("nospec", "sync", "async"),
    "pit_independence": ("nospec", "sync", "async"),
    "pit_correlation": ("nospec", "sync", "async"),
    "acceptance_all": ("sync", "async"),
    "mechanism_pit": ("sync", "async"),
    "mechanism_mean": ("sync", "async"),
    "crossing_count": ("nospec", "sync", "async"),
    "accept_after_bonus": ("sync", "async"),
}


@dataclass(frozen=True)
class Context:
    alpha: float  # per-test level of the rows that do not decide
    rule: FamilyRule
    round_bands: list[int]
    min_samples: int
    bins: int
    error_tolerance: int
    modes: dict[str, str]  # group -> mode
    requests: Requests
    tokens: Tokens

    @classmethod
    def build(cls, protocol: dict, requests: Requests, tokens: Tokens) -> Context:
        strata = protocol.get("strata") or {}
        return cls(
            alpha=float(protocol["alpha"]),
            rule=FamilyRule.from_protocol(protocol, DECIDING_ROLES),
            round_bands=list(strata.get("round_bands", [0, 1, 4, 16])),
            min_samples=int(strata.get("min_samples", 50)),
            bins=int(strata.get("bins", 10)),
            error_tolerance=int((protocol.get("engine_errors") or {}).get("tolerance", 0)),
            modes={g["name"]: g["mode"] for g in protocol["groups"]},
            requests=requests,
            tokens=tokens,
        )

    def groups_of(self, spec: dict) -> list[str]:
        """The groups a test reads: those it names, or every group its type applies to."""
        if spec.get("groups"):
            return list(spec["groups"])
        modes = STOCHASTIC_APPLIES.get(spec["type"], ("nospec", "sync", "async"))
        return [g for g, m in self.modes.items() if m in modes]

    def in_groups(self, names: list[str]) -> np.ndarray:
        """[N] bool: the token belongs to one of the named groups."""
        codes = [self.tokens.groups.index(g) for g in names]
        return np.isin(self.tokens.group, codes)

    def row(
        self,
        spec: dict,
        statistic,
        df,
        pvalue,
        n: int,
        detail: Record,
        method: str,
        why_none: str | None = None,
    ) -> TestRow:
        """A stochastic row at the per-test level; :func:`family_verdict` re-decides
        deciding rows. NaN/None p-value or n 0: no evidence (never a pass); ``why_none``,
        when given, says why in the reason."""
        reason = "no evidence" if why_none is None else f"no evidence: {why_none}"
        why = why_none or "nothing testable: no stratum, pair row or cell"
        return stochastic_row(
            spec, statistic, df, pvalue, n, self.alpha, detail, method, reason, why
        )
