"""The raw frames of a sequence run, checked against the protocol and read into arrays.

:class:`Tokens` holds one entry per committed token (file row order, which fixes the
V_t of the PIT), with its request's greedy flag and its U; :class:`Requests` one entry
per request. Raw data that does not fit the protocol (a missing column, a group the
protocol lacks, a request count that differs, a request whose tokens are not one block
of rows with steps 0, 1, ..., n_tokens - 1, probabilities outside [0, 1]) raises
ValueError naming what is wrong: `verify` reports it as a failure to recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.stats.pit import randomized_pit

from .raw import (
    CROSS_COLUMNS,
    FILTER_COLUMNS,
    MECH_COLUMNS,
    MECH_STREAM,
    REQUEST_COLUMNS,
    TOKEN_COLUMNS,
    TOKEN_KINDS,
)

KIND_CODES = {k: i for i, k in enumerate(TOKEN_KINDS)}
ACCEPTED, CORRECTION, BONUS, TARGET, UNKNOWN = (KIND_CODES[k] for k in TOKEN_KINDS)
PROB_SLACK = 1e-9  # float64 rounding allowed on cdf_below + p_token <= 1


@dataclass(frozen=True)
class Requests:
    """One entry per request, sorted by (group, request); arrays [R]."""

    group: np.ndarray  # int64 index into Tokens.groups
    request: np.ndarray  # int64
    greedy: np.ndarray  # bool: temperature 0
    error: np.ndarray  # bool: finish_reason == "error"
    n_tokens: np.ndarray  # int64: committed tokens returned
    # bool: a filter decides the support (greedy's argmax, top_k > 0 or top_p < 1)
    filtered: np.ndarray


@dataclass(frozen=True)
class Tokens:
    """One entry per committed token in file row order; arrays [N]."""

    groups: tuple[str, ...]  # the protocol's group names; `group` indexes them
    group: np.ndarray  # int64
    request: np.ndarray  # int64
    step: np.ndarray  # int64
    round: np.ndarray  # int64 (-1 plain target sample, -2 no events)
    position: np.ndarray  # int64
    kind: np.ndarray  # int64 code of TOKEN_KINDS
    drafted: np.ndarray  # int64
    p_token: np.ndarray  # float64
    tv: np.ndarray  # float64, NaN where empty
    u: np.ndarray  # float64, the randomized PIT (meaningless where p_token == 0)
    mid: np.ndarray  # float64, the mid-PIT cdf_below + p_token / 2 (no V_t)
    greedy: np.ndarray  # bool: the token's request is greedy
    # The mechanism columns (NaN where empty, everywhere when the archive lacks them)
    # and the mechanism PIT M_t under the conditional law given the accept decision.
    has_mech: bool  # tokens.csv has the mech_* columns
    mech_p: np.ndarray  # float64 f(x_t) under r or a; 0: mechanism out of support
    mech_u: np.ndarray  # float64 M_t (meaningless where mech_p is 0 or NaN)
    # The top-p crossing columns (NaN where empty, everywhere when the archive lacks them).
    has_cross: bool  # tokens.csv has the cross_* columns
    cross_p: np.ndarray  # float64 p_t(c_t)
    cross_hit: np.ndarray  # float64 1.0 where x_t = c_t, else 0.0
    # filter_margin (NaN where empty, everywhere when the archive lacks it): at a
    # zero-probability token, its filter decision's distance from flipping in units of
    # the numerics model's error (<= 1: a near-tie); and the request's filtered flag.
    filter_margin: np.ndarray  # float64
    filtered: np.ndarray  # bool

    @property
    def in_support(self) -> np.ndarray:
        return self.p_token > 0

    @property
    def random(self) -> np.ndarray:
        """Tokens whose U carries information: non-greedy and in support."""
        return ~self.greedy & self.in_support


def read_frames(protocol: dict, requests_df, tokens_df) -> tuple[Requests, Tokens]:
    """Check the frames against the protocol and the raw contract; draw the V_t."""
    _columns(requests_df, REQUEST_COLUMNS, "requests.csv")
    _columns(tokens_df, TOKEN_COLUMNS, "tokens.csv")
    groups = tuple(g["name"] for g in protocol["groups"])
    index = {g: i for i, g in enumerate(groups)}
    requests = _requests(protocol, requests_df, index)
    g = _group_codes(tokens_df["group"], index, "tokens.csv")
    req = tokens_df["request"].to_numpy(dtype=np.int64)
    step = tokens_df["step"].to_numpy(dtype=np.int64)
    key_r = (requests.group << 32) + requests.request  # sorted
    key_t = (g << 32) + req
    at = np.searchsorted(key_r, key_t)
    found = at < key_r.size
    found[found] = key_r[at[found]] == key_t[found]
    if not found.all():
        i = int(np.flatnonzero(~found)[0])
        raise ValueError(f"tokens.csv row {i}: request {int(req[i])} is not in requests.csv")
    _check_steps(requests, at, step)
    kind = _kinds(tokens_df["kind"])
    cdf = tokens_df["cdf_below"].to_numpy(dtype=np.float64)
    p = tokens_df["p_token"].to_numpy(dtype=np.float64)
    tv = tokens_df["tv"].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(cdf) | ~np.isfinite(p) | (cdf < 0) | (p < 0) | (cdf + p > 1 + PROB_SLACK)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"tokens.csv row {i}: cdf_below {cdf[i]!r} and p_token {p[i]!r} are not "
            "probabilities with cdf_below + p_token <= 1"
        )
    if np.any(np.isfinite(tv) & ((tv < 0) | (tv > 1 + PROB_SLACK))):
        raise ValueError("tokens.csv: a tv lies outside [0, 1]")
    seed = int(protocol.get("pit_seed", 0))
    v = np.random.default_rng(seed).random(p.size)
    has_mech, mech_cdf, mech_p = _mech_columns(tokens_df, kind)
    w = np.random.default_rng([seed, MECH_STREAM]).random(p.size)
    tokens = Tokens(
        groups=groups,
        group=g,
        request=req,
        step=step,
        round=tokens_df["round"].to_numpy(dtype=np.int64),
        position=tokens_df["position"].to_numpy(dtype=np.int64),
        kind=kind,
        drafted=tokens_df["drafted"].to_numpy(dtype=np.int64),
        p_token=p,
        tv=tv,
        u=randomized_pit(cdf, p, v),
        mid=cdf + 0.5 * p,
        greedy=requests.greedy[at],
        has_mech=has_mech,
        mech_p=mech_p,
        mech_u=randomized_pit(np.nan_to_num(mech_cdf), np.nan_to_num(mech_p), w),
        **_cross_columns(tokens_df),
        filter_margin=_filter_margin(tokens_df, p, mech_p),
        filtered=requests.filtered[at],
    )
    return requests, tokens


def _cross_columns(frame) -> dict:
    """has_cross, cross_p, cross_hit: both columns or neither; set together; p in
    (0, 1], hit 0 or 1."""
    present = [c for c in CROSS_COLUMNS if c in frame.columns]
    n = len(frame)
    if not present:
        return {"has_cross": False, "cross_p": np.full(n, np.nan), "cross_hit": np.full(n, np.nan)}
    if len(present) != len(CROSS_COLUMNS):
        raise ValueError(f"tokens.csv: has {present} without the rest of {list(CROSS_COLUMNS)}")
    p = frame["cross_p"].to_numpy(dtype=np.float64)
    hit = frame["cross_hit"].to_numpy(dtype=np.float64)
    set_p, set_h = ~np.isnan(p), ~np.isnan(hit)
    with np.errstate(invalid="ignore"):
        bad = (set_p != set_h) | (set_p & ~((p > 0) & (p <= 1 + PROB_SLACK)))
        bad |= set_h & (hit != 0) & (hit != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"tokens.csv row {i}: cross_p {p[i]!r} and cross_hit {hit[i]!r} are not both "
            "empty, or not a probability in (0, 1] and a 0/1 hit"
        )
    return {"has_cross": True, "cross_p": p, "cross_hit": hit}


def _filter_margin(frame, p: np.ndarray, mech_p: np.ndarray) -> np.ndarray:
    """filter_margin as float64 [N] (NaN where empty, or when the archive lacks it): set
    only at a zero-probability token (p_token 0 or mech_p_token 0), never negative."""
    if FILTER_COLUMNS[0] not in frame.columns:
        return np.full(p.size, np.nan)
    m = frame[FILTER_COLUMNS[0]].to_numpy(dtype=np.float64)
    bad = ~np.isnan(m) & ((m < 0) | ((p != 0) & (mech_p != 0)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"tokens.csv row {i}: filter_margin {float(m[i])!r} at a token of nonzero probability "
            "(or negative)"
        )
    return m


def _mech_columns(frame, kind: np.ndarray) -> tuple[bool, np.ndarray, np.ndarray]:
    """(present, mech_cdf_below, mech_p_token) as float64 [N], NaN where empty. Both
    columns or neither; a value only at a drafted token; both empty or both set;
    probabilities with cdf + p <= 1."""
    present = [c for c in MECH_COLUMNS if c in frame.columns]
    n = int(kind.size)
    if not present:
        return False, np.full(n, np.nan), np.full(n, np.nan)
    if len(present) != len(MECH_COLUMNS):
        raise ValueError(f"tokens.csv: has {present} without the rest of {list(MECH_COLUMNS)}")
    cdf = frame["mech_cdf_below"].to_numpy(dtype=np.float64)
    p = frame["mech_p_token"].to_numpy(dtype=np.float64)
    set_c, set_p = ~np.isnan(cdf), ~np.isnan(p)
    drafted = (kind == ACCEPTED) | (kind == CORRECTION)
    bad = (set_c != set_p) | (set_p & ~drafted)
    with np.errstate(invalid="ignore"):
        bad |= set_p & (~np.isfinite(cdf) | ~np.isfinite(p) | (cdf < 0) | (p < 0))
        bad |= set_p & (cdf + p > 1 + PROB_SLACK)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"tokens.csv row {i}: mech_cdf_below {cdf[i]!r} and mech_p_token {p[i]!r} are "
            "not both empty, or not probabilities with sum <= 1 at a drafted token"
        )
    return True, cdf, p


def _requests(protocol: dict, frame, index: dict[str, int]) -> Requests:
    g = _group_codes(frame["group"], index, "requests.csv")
    req = frame["request"].to_numpy(dtype=np.int64)
    order = np.lexsort((req, g))
    g, req = g[order], req[order]
    temperature = frame["temperature"].to_numpy(dtype=np.float64)[order]
    finish = frame["finish_reason"].astype(str).to_numpy()[order]
    n_tokens = frame["n_tokens"].to_numpy(dtype=np.int64)[order]
    seeds = protocol.get("seeds") or {}
    for name, i in index.items():
        group = next(x for x in protocol["groups"] if x["name"] == name)
        want = group.get("requests") or seeds.get("count")
        have = req[g == i]
        if want is not None and not np.array_equal(have, np.arange(int(want))):
            raise ValueError(
                f"requests.csv: group {name!r} has {have.size} request(s) (indices "
                f"{_short(have)}), the protocol {want}"
            )
    filtered = (temperature == 0.0) | (frame["top_k"].to_numpy(dtype=np.int64)[order] > 0)
    filtered |= frame["top_p"].to_numpy(dtype=np.float64)[order] < 1.0
    return Requests(g, req, temperature == 0.0, finish == "error", n_tokens, filtered)


def _check_steps(requests: Requests, at: np.ndarray, step: np.ndarray) -> None:
    """Each request's tokens are one block of rows with steps 0, 1, ..., n_tokens - 1
    (``at``: [N] index of each token's request)."""
    new_block = np.ones(at.size, dtype=bool)
    new_block[1:] = at[1:] != at[:-1]
    starts = np.flatnonzero(new_block)
    if np.unique(at[starts]).size != starts.size:
        raise ValueError("tokens.csv: a request's tokens are not one contiguous block of rows")
    block = np.cumsum(new_block) - 1
    expected_step = np.arange(at.size) - starts[block]
    if not np.array_equal(step, expected_step):
        i = int(np.flatnonzero(step != expected_step)[0])
        raise ValueError(f"tokens.csv row {i}: step {step[i]} breaks the run 0, 1, 2, ...")
    counts = np.bincount(at, minlength=requests.n_tokens.size)
    if not np.array_equal(counts, requests.n_tokens):
        i = int(np.flatnonzero(counts != requests.n_tokens)[0])
        raise ValueError(
            f"requests.csv: request {int(requests.request[i])} of group index "
            f"{int(requests.group[i])} states n_tokens {int(requests.n_tokens[i])}, "
            f"tokens.csv has {int(counts[i])}"
        )


def _group_codes(column, index: dict[str, int], where: str) -> np.ndarray:
    codes = column.astype(str).map(index)
    if codes.isna().any():
        unknown = sorted(set(column.astype(str)) - set(index))
        raise ValueError(f"{where}: group(s) {unknown} not in the protocol")
    return codes.to_numpy(dtype=np.int64)


def _kinds(column) -> np.ndarray:
    codes = column.astype(str).map(KIND_CODES)
    if codes.isna().any():
        unknown = sorted(set(column.astype(str)) - set(KIND_CODES))
        raise ValueError(f"tokens.csv: kind(s) {unknown} not in {list(TOKEN_KINDS)}")
    return codes.to_numpy(dtype=np.int64)


def _columns(frame, columns: tuple[str, ...], where: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}")


def _short(values: np.ndarray) -> str:
    head = ", ".join(str(int(v)) for v in values[:5])
    return f"[{head}{', ...' if values.size > 5 else ''}]"
