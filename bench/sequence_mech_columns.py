"""Cost of the mechanism columns in the sequence runner's per-token reduction.

Times `specconform.runner.sequence_laws.token_rows` on synthetic requests shaped like
protocols/ci_sequence.yaml's reference step (tiny preset: V = 512; ~7,400 committed
tokens, ~60 % of them at drafted positions), once as shipped and once as the
reduction was before the mechanism PIT (`_before`: the same loop without the mechanism
columns), and prints the two side by side with their ratio.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sequence_mech_columns.py
"""

from __future__ import annotations

import time

import _checkout  # noqa: F401  (this checkout first on sys.path)
import numpy as np

from specconform.adapters.engine import TokenEvent
from specconform.adapters.sequence import SequenceRecord
from specconform.runner import sequence_laws

V, TOKENS_PER_REQUEST, REQUESTS = 512, 160, 46  # ~7,400 tokens


def _request(rng: np.random.Generator):
    kinds = rng.choice(["accepted", "correction", "bonus"], TOKENS_PER_REQUEST, p=[0.45, 0.15, 0.4])
    events = tuple(TokenEvent(0, 0, str(k)) for k in kinds)
    tokens = tuple(int(t) for t in rng.integers(0, V, TOKENS_PER_REQUEST))
    rec = SequenceRecord(tokens, "length", events, rounds=((3, 3),))
    p = rng.dirichlet(np.ones(V), TOKENS_PER_REQUEST).astype(np.float32)
    q = rng.dirichlet(np.ones(V), TOKENS_PER_REQUEST).astype(np.float32)
    return rec, sequence_laws.RequestLaws(p, q)


def _before(group, request, record, laws) -> list[tuple]:
    """token_rows as it was before the mechanism columns (commit 1a1ab23)."""
    rows = []
    slots = sequence_laws.token_slots(record)
    for t, (x, slot) in enumerate(zip(record.tokens, slots, strict=True)):
        p = sequence_laws.normalized(laws.p[t])
        cdf_below, p_token, tv = float(np.sum(p[:x])), float(p[x]), float("nan")
        if slot.kind in sequence_laws.DRAFTED_KINDS:
            q = laws.q_at(t)
            if q is not None:
                tv = 0.5 * float(np.abs(p - sequence_laws.normalized(q)).sum())
        rows.append((group, request, t, int(x), slot.round, slot.position, slot.kind, slot.drafted))
        rows[-1] += (cdf_below, p_token, tv)
    return rows


def _time(requests, reduce) -> float:
    t0 = time.perf_counter()
    for i, (rec, laws) in enumerate(requests):
        reduce("g", i, rec, laws)
    return time.perf_counter() - t0


def main() -> int:
    rng = np.random.default_rng(0)
    requests = [_request(rng) for _ in range(REQUESTS)]
    shipped = min(_time(requests, sequence_laws.token_rows) for _ in range(3))
    without = min(_time(requests, _before) for _ in range(3))
    n = REQUESTS * TOKENS_PER_REQUEST
    print(f"token_rows over {n} tokens (V = {V}), best of 3:")
    print(f"  without mechanism columns  {without:7.3f} s")
    print(f"  with mechanism columns     {shipped:7.3f} s   ratio {shipped / without:.2f}x")
    print(f"  added                      {shipped - without:7.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
