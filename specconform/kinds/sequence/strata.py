"""Strata of the PIT uniformity test and the pairs of the independence tests.

Every rule here reads only what is known *before* the token it places is drawn, so each
stratum (and each row of a pair table) is a predictable selection of i.i.d. uniforms
under the null (specconform.stats.pit):

- slot: a plain target sample (kind target: prefill, nospec), draft position j (kind
  accepted or correction at position j: whether a round reaches j is decided by the
  drafts before j), or the bonus (position == drafted). Accepted and corrected tokens
  of one position share a slot: which of the two a token is is decided with the token.
  An engine without events (kind unknown) has one slot, ``all``.
- round band: round index in [b_i, b_{i+1}) of the protocol's ``strata.round_bands``.

Pooling: a (slot, band) stratum with fewer than ``min_samples`` tokens joins its slot's
last band; if that pooled stratum is still short it joins the slot's last stratum that
stands alone, and if none does the slot is not tested (the coverage row shows it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.details.sequence import UniformityStratum
from specconform.evidence.jsonio import json_number
from specconform.stats.pit import UniformityResult

from .records import ACCEPTED, BONUS, CORRECTION, TARGET, UNKNOWN, Tokens

SLOT_TARGET, SLOT_ALL, SLOT_BONUS = -1, -2, -3  # draft positions are slots 0, 1, ...


def slot_label(slot: int) -> str:
    return {SLOT_TARGET: "target", SLOT_ALL: "all", SLOT_BONUS: "bonus"}.get(slot, f"draft_{slot}")


def slots(tokens: Tokens) -> np.ndarray:
    """[N] int64 slot of every token (draft position j >= 0, or a SLOT_* code)."""
    out = np.full(tokens.kind.size, SLOT_ALL, dtype=np.int64)
    drafted = (tokens.kind == ACCEPTED) | (tokens.kind == CORRECTION)
    out[drafted] = tokens.position[drafted]
    out[tokens.kind == BONUS] = SLOT_BONUS
    out[tokens.kind == TARGET] = SLOT_TARGET
    out[tokens.kind == UNKNOWN] = SLOT_ALL
    return out


def bands(rounds: np.ndarray, round_bands: list[int]) -> np.ndarray:
    """[N] int64 band index of each round (rounds below the first edge: band 0)."""
    edges = np.asarray(sorted(round_bands), dtype=np.int64)
    return np.clip(np.searchsorted(edges, rounds, side="right") - 1, 0, edges.size - 1)


@dataclass(frozen=True)
class Stratum:
    slot: int
    bands: tuple[int, ...]  # band indices pooled into this stratum
    members: np.ndarray  # [n] int64 token indices

    def rounds(self, round_bands: list[int]) -> tuple[str, ...]:
        """The round bands pooled into this stratum, as "[lo, hi)" (slots without rounds:
        "all")."""
        edges = sorted(round_bands)
        if not (self.slot >= 0 or self.slot == SLOT_BONUS):
            return ("all",)
        return tuple(
            f"[{edges[b]}, {edges[b + 1] if b + 1 < len(edges) else 'inf'})" for b in self.bands
        )


def uniformity_strata(
    tokens: Tokens, selected: np.ndarray, round_bands: list[int], min_samples: int
) -> tuple[list[Stratum], dict[str, int]]:
    """Strata of the selected tokens ([N] bool) and the tokens of untested slots per slot."""
    slot = slots(tokens)
    band = bands(tokens.round, round_bands)
    # Target samples and engines without events have no rounds: one band.
    band = np.where((slot == SLOT_TARGET) | (slot == SLOT_ALL), 0, band)
    out: list[Stratum] = []
    untested: dict[str, int] = {}
    for s in np.unique(slot[selected]):
        in_slot = selected & (slot == s)
        present = np.unique(band[in_slot])
        sizes = {int(b): int((in_slot & (band == b)).sum()) for b in present}
        last = int(present.max())
        standing = [b for b in present if sizes[int(b)] >= min_samples and int(b) != last]
        pooled = [int(b) for b in present if int(b) not in standing]
        parts = [
            Stratum(int(s), (int(b),), np.flatnonzero(in_slot & (band == b))) for b in standing
        ]
        tail = np.flatnonzero(in_slot & np.isin(band, pooled))
        if tail.size >= min_samples:
            parts.append(Stratum(int(s), tuple(pooled), tail))
        elif parts:
            head = parts.pop()
            parts.append(
                Stratum(
                    int(s), (*head.bands, *pooled), np.sort(np.concatenate([head.members, tail]))
                )
            )
        else:
            untested[slot_label(int(s))] = int(tail.size)
        out += parts
    return out, untested


def lag1_pairs(tokens: Tokens, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) token indices of consecutive steps of one request, both selected."""
    i = np.arange(tokens.u.size - 1)
    same = (tokens.group[:-1] == tokens.group[1:]) & (tokens.request[:-1] == tokens.request[1:])
    ok = same & (tokens.step[1:] == tokens.step[:-1] + 1) & selected[:-1] & selected[1:]
    return i[ok], i[ok] + 1


def round_pairs(tokens: Tokens, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of drafted tokens at the same position j in rounds r and r + 1 of one
    request (the first is drawn before the second), both selected."""
    drafted = selected & ((tokens.kind == ACCEPTED) | (tokens.kind == CORRECTION))
    idx = np.flatnonzero(drafted)
    g, req, rnd, pos = (
        tokens.group[idx],
        tokens.request[idx],
        tokens.round[idx],
        tokens.position[idx],
    )
    return _match(idx, _code(g, req, rnd, pos), _code(g, req, rnd + 1, pos))


def request_pairs(tokens: Tokens, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs at the same step of requests 2i and 2i + 1 of one group, both selected:
    disjoint pairs of independent requests under the null."""
    even = np.flatnonzero(selected & (tokens.request % 2 == 0))
    odd = np.flatnonzero(selected & (tokens.request % 2 == 1))
    zero_e, zero_o = np.zeros(even.size, np.int64), np.zeros(odd.size, np.int64)
    key_even = _code(tokens.group[even], tokens.request[even] // 2, tokens.step[even], zero_e)
    key_odd = _code(tokens.group[odd], tokens.request[odd] // 2, tokens.step[odd], zero_o)
    first, second = _match_two(even, key_even, odd, key_odd)
    return first, second


def request_round_pairs(tokens: Tokens, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of round tokens (drafted or bonus) at the same round r and position j of
    requests 2i and 2i + 1 of one group, both selected.

    Each request's (round, position) labels are its own past (a correct engine's request
    does not depend on its batch neighbours: the isolation check), so under the null
    these are pairs of independent uniforms, as the step-aligned ``request_pairs``.
    They differ in what they align: randomness keyed by the round (a per-round counter
    without the request's seed) correlates tokens of one round and position even after
    the two requests' acceptances have moved their steps apart."""
    in_round = (tokens.kind == ACCEPTED) | (tokens.kind == CORRECTION) | (tokens.kind == BONUS)
    chosen = selected & in_round
    even = np.flatnonzero(chosen & (tokens.request % 2 == 0))
    odd = np.flatnonzero(chosen & (tokens.request % 2 == 1))

    def key(idx: np.ndarray) -> np.ndarray:
        return _code(
            tokens.group[idx], tokens.request[idx] // 2, tokens.round[idx], tokens.position[idx]
        )

    return _match_two(even, key(even), odd, key(odd))


# Every pairing of the pit_independence and pit_correlation tests, by its ``pairs`` name.
PAIRS = {
    "lag1": lag1_pairs,
    "rounds": round_pairs,
    "requests": request_pairs,
    "request_rounds": request_round_pairs,
}
PAIR_TEXT = {
    "lag1": "(U_t, U_t+1) of one request",
    "rounds": "(U at position j of round r, U at position j of round r + 1) of one request",
    "requests": "(U of request 2i, U of request 2i + 1) at the same step, one group",
    "request_rounds": "(U of request 2i, U of request 2i + 1) at the same round and position, "
    "one group",
}


def _code(group, request, major, minor) -> np.ndarray:
    """One int64 per (group < 2^10, request < 2^20, major < 2^20, minor < 2^8): rounds
    and steps stay below 2^20 and draft positions below 2^8 (K <= 16 in the schema)."""
    key = np.asarray(group, dtype=np.int64)
    for part, bits in ((request, 20), (major, 20), (minor, 8)):
        key = key * (1 << bits) + np.asarray(part, dtype=np.int64)
    return key


def _match(idx: np.ndarray, key: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(idx[i], idx[k]) for every i whose wanted[i] is some key[k] (keys unique)."""
    return _match_two(idx, wanted, idx, key)


def _match_two(idx_a, key_a, idx_b, key_b) -> tuple[np.ndarray, np.ndarray]:
    """(idx_a[i], idx_b[k]) for every i with key_a[i] == key_b[k] (key_b unique)."""
    if key_a.size == 0 or key_b.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    order = np.argsort(key_b, kind="stable")
    sorted_b = key_b[order]
    at = np.minimum(np.searchsorted(sorted_b, key_a), sorted_b.size - 1)
    hit = sorted_b[at] == key_a
    return idx_a[hit], idx_b[order[at[hit]]]


def uniformity_stratum(
    res: UniformityResult,
    stratum: Stratum,
    round_bands: list[int],
    *,
    group: str,
    law: str | None = None,
) -> UniformityStratum:
    """One stratum's χ² of U's on equiprobable bins: its group (and law), slot, round
    bands and counts."""
    return UniformityStratum(
        group=group,
        law=law,
        slot=slot_label(stratum.slot),
        rounds=stratum.rounds(round_bands),
        n=res.n,
        statistic=json_number(res.statistic),
        df=res.df,
        pvalue=json_number(res.pvalue),
        observed=tuple(res.observed),
        expected=(res.expected,) * len(res.observed),
        ks_statistic=res.ks_statistic,
        ks_pvalue=res.ks_pvalue,
    )
