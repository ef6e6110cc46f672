"""Monte Carlo runner: ragged multi-draft batches of the accept kernel.

Each case fixes laws p_0..p_K and q_0..q_{K-1} (from its law_seed) and a round-robin list
of draft lengths. Every row draws its drafts x_j ~ q_j and its 2K+1 uniforms from numpy's
PCG64 keyed by (seed offset, case index), so a run is reproducible bit for bit. The
kernel's outputs are reduced to counts per position j:

- ``accept``  rows that reached j (< draft length) and accepted x_j: cell (accept, x_j);
- ``reject``  rows that stopped at j by rejection: cell (reject, correction token);
- ``bonus``   rows that accepted all L drafts: cell (bonus at position L, token).

Those counts are the raw data; `specconform.kinds.montecarlo` tests them against the analytic laws
min(p_j, q_j), (p_j - q_j)_+ and p_L.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from specconform.kinds.laws import montecarlo_laws

_MAX_CHUNK_ELEMENTS = 1 << 23


def case_generator(offset: int, case_index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([int(offset), int(case_index)]))


def collect(protocol, kernel, progress) -> dict[str, bytes]:
    n_rows = protocol.seeds.count
    frames = []
    with progress("montecarlo", n_rows * len(protocol.cases)) as bar:
        for index, case in enumerate(protocol.cases):
            frames.append(_run_case(case, index, protocol.seeds.offset, n_rows, kernel, bar))
    counts = pd.concat(frames, ignore_index=True)
    buf = io.StringIO()
    counts.to_csv(buf, index=False, lineterminator="\n")
    return {"raw/montecarlo_counts.csv": buf.getvalue().encode()}


def _run_case(case, index, offset, n_rows, kernel, bar) -> pd.DataFrame:
    p, q = montecarlo_laws(case)
    K, V = case.K, case.vocab
    rng = case_generator(offset, index)
    lens = np.resize(np.asarray(case.draft_lens, dtype=np.int64), n_rows)
    q64 = q.astype(np.float64)
    drafts = np.stack(
        [rng.choice(V, size=n_rows, p=q64[j] / q64[j].sum()) for j in range(K)], axis=1
    )
    uniforms = rng.random((n_rows, 2 * K + 1))
    chunk = max(1, _MAX_CHUNK_ELEMENTS // ((K + 1) * V))
    tables = []
    for s in range(0, n_rows, chunk):
        e = min(n_rows, s + chunk)
        b = e - s
        out = kernel.accept(
            np.ascontiguousarray(np.broadcast_to(p, (b, K + 1, V))),
            np.ascontiguousarray(np.broadcast_to(q, (b, K, V))),
            drafts[s:e],
            lens[s:e],
            uniforms[s:e],
        )
        tables.append(_cells(out, lens[s:e]))
        bar.advance(b)
    cells = pd.concat(tables, ignore_index=True)
    counts = (
        cells.groupby(["position", "cell", "token"], sort=True).size().rename("count").reset_index()
    )
    counts.insert(0, "case", case.name)
    return counts


def _cells(out, lens: np.ndarray) -> pd.DataFrame:
    """One record per (row, position) outcome; errors recorded as cell 'error'."""
    n, k1 = out.tokens.shape
    a = out.num_accepted.astype(np.int64)
    rows, pos, cell, tok = [], [], [], []
    j = np.arange(k1)[None, :]
    accepted = (j < a[:, None]) & ~out.error[:, None]
    r, c = np.nonzero(accepted)
    (
        rows.append(r),
        pos.append(c),
        cell.append(np.full(r.size, "accept")),
        tok.append(out.tokens[r, c]),
    )
    ok = ~out.error
    stop_reject = ok & (a < lens)
    r = np.flatnonzero(stop_reject)
    (
        rows.append(r),
        pos.append(a[r]),
        cell.append(np.full(r.size, "reject")),
        tok.append(out.tokens[r, a[r]]),
    )
    r = np.flatnonzero(ok & (a == lens))
    (
        rows.append(r),
        pos.append(a[r]),
        cell.append(np.full(r.size, "bonus")),
        tok.append(out.tokens[r, a[r]]),
    )
    r = np.flatnonzero(out.error)
    (
        rows.append(r),
        pos.append(np.full(r.size, -1)),
        cell.append(np.full(r.size, "error")),
        tok.append(np.full(r.size, -1)),
    )
    return pd.DataFrame(
        {
            "position": np.concatenate(pos),
            "cell": np.concatenate(cell),
            "token": np.concatenate(tok).astype(np.int64),
        }
    )
