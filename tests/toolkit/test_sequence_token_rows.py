"""token_rows (runner/sequence_laws.py) reduces chunks of rows at once; its rows must be
bit for bit those of the one-token-at-a-time reduction it replaced (kept below as
``_one_token_at_a_time``, the code of commit ec9298c), so that tokens.csv, and every
archive recomputed from it, keeps its bytes."""

import math

import numpy as np
import pytest

from specconform.adapters.engine import TokenEvent
from specconform.adapters.sequence import SequenceRecord
from specconform.runner import sequence_laws as sl
from specconform.stats.crossing import crossing_columns
from specconform.stats.mechanism import mechanism_columns


def _one_token_at_a_time(group, request, record, laws, top_p=False):
    rows, cross = [], []
    mech_at, mech_p, mech_q, mech_x, mech_fix = [], [], [], [], []
    for t, (x, slot) in enumerate(zip(record.tokens, sl.token_slots(record), strict=True)):
        p = sl.normalized(laws.p[t])
        cdf_below, p_token, tv = float(np.sum(p[:x])), float(p[x]), float("nan")
        if slot.kind in sl.DRAFTED_KINDS:
            q = laws.q_at(t)
            if q is not None:
                q = sl.normalized(q)
                tv = 0.5 * float(np.abs(p - q).sum())
                mech_at.append(t)
                mech_p.append(p)
                mech_q.append(q)
                mech_x.append(int(x))
                mech_fix.append(slot.kind == "correction")
        rows.append(
            (group, request, t, int(x), slot.round, slot.position, slot.kind, slot.drafted)
            + (cdf_below, p_token, tv)
        )
        if top_p:
            c_p, c_hit = crossing_columns(p[None, :], np.array([int(x)]))
            cross.append((float(c_p[0]), float(c_hit[0])))
        else:
            cross.append((float("nan"), float("nan")))
    mech = [(float("nan"), float("nan"))] * len(rows)
    if mech_at:
        c, f = mechanism_columns(np.stack(mech_p), np.stack(mech_q), mech_x, mech_fix)
        for i, t in enumerate(mech_at):
            mech[t] = (float(c[i]), float(f[i]))
    return [row + m + c for row, m, c in zip(rows, mech, cross, strict=True)]


def _same(a, b) -> bool:
    """Rows equal value for value, NaN equal to NaN, floats compared bit for bit."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if not (math.isnan(x) and math.isnan(y)) and x.hex() != y.hex():
                    return False
            elif x != y or type(x) is not type(y):
                return False
    return True


def _request(seed, T, V, dtype, q_form, events=True):
    rng = np.random.default_rng(seed)
    kinds = rng.choice(["accepted", "correction", "bonus"], T, p=[0.45, 0.2, 0.35])
    tokens = tuple(int(t) for t in rng.integers(0, V, T))
    ev = tuple(TokenEvent(t // 3, t % 3, str(k)) for t, k in enumerate(kinds)) if events else None
    rec = SequenceRecord(tokens, "length", ev, rounds=tuple((3, 2) for _ in range(T)))
    p = rng.dirichlet(np.full(V, 0.3), T)
    p[:, rng.integers(0, V, V // 3)] = 0.0  # filtered laws: zeros, the tokens among them
    p /= p.sum(axis=1, keepdims=True)
    q = rng.dirichlet(np.full(V, 0.3), T)
    p, q = p.astype(dtype), q.astype(dtype)
    q_laws = {"array": q, "dict": {t: q[t] for t in range(0, T, 2)}, "none": None}[q_form]
    return rec, sl.RequestLaws(p, q_laws)


@pytest.mark.parametrize("T", [1, 5, sl.ROWS_PER_CHUNK, 2 * sl.ROWS_PER_CHUNK + 7])
@pytest.mark.parametrize("q_form", ["array", "dict", "none"])
@pytest.mark.parametrize("top_p", [False, True])
def test_rows_equal_the_one_token_reduction(T, q_form, top_p):
    for V, dtype in ((97, np.float32), (4099, np.float64)):
        rec, laws = _request(T * 31 + V, T, V, dtype, q_form)
        got = sl.token_rows("g", 3, rec, laws, top_p=top_p)
        assert _same(got, _one_token_at_a_time("g", 3, rec, laws, top_p=top_p))


def test_rows_without_events_equal_too():
    rec, laws = _request(5, 70, 211, np.float32, "array", events=False)
    assert _same(sl.token_rows("g", 0, rec, laws), _one_token_at_a_time("g", 0, rec, laws))


def test_the_comparison_sees_a_one_ulp_change():
    # Negative control of _same: the last bit of one law entry moves one row's columns.
    rec, laws = _request(9, 12, 97, np.float64, "array")
    before = sl.token_rows("g", 0, rec, laws)
    x = rec.tokens[4]
    laws.p[4, :] = np.nextafter(laws.p[4, :], 1.0)  # every entry up one ulp
    assert laws.p[4, x] > 0 or x == 0
    assert not _same(before, sl.token_rows("g", 0, rec, laws))


def test_normalized_rows_equals_normalized_row_by_row():
    rng = np.random.default_rng(2)
    for V in (7, 1000, 49152):
        law = (rng.random((9, V)) ** 6).astype(np.float32)
        got = sl.normalized_rows(law)
        for t in range(9):
            assert np.array_equal(got[t], sl.normalized(law[t]))
