"""Quadrature runner: integrate a single-draft accept kernel over a grid of its uniforms.

For each case (p, q) and each draft x in q's support the kernel runs on every point of
a midpoint grid over two of its three uniforms; weighting the grid counts by q(x) gives
the kernel's exact output law up to the grid's bound (see `specconform.kinds.quadrature`). Three
integrals per case:

- first committed token, grid over (coin u0, correction draw u1): law must equal p;
- bonus after acceptance, grid over (coin u0, bonus draw u2): must equal (1 - TV) * p_bonus;
- effective K = 0 (draft length 0), grid over u2: must equal p.

Plus an edge sweep with uniforms at 0, 1/2 and the largest double below 1, checking that
no committed token ever has zero target mass (exact, no bound).
"""

from __future__ import annotations

import numpy as np

from specconform.adapters.kernel import ensure_uses_uniforms
from specconform.kinds.laws import quadrature_case_laws as case_laws

EDGE_UNIFORMS = (0.0, 0.5, float(np.nextafter(1.0, 0.0)))
_MAX_CHUNK_ELEMENTS = 1 << 23  # rows * V per kernel call: bounds memory on big vocabs


def midpoint_grid(g: int) -> np.ndarray:
    return (np.arange(g, dtype=np.float64) + 0.5) / g


def collect(protocol, kernel, progress) -> dict[str, bytes]:
    """Run every case; returns raw files {'raw/quadrature/<case>.json': bytes}."""
    import json

    files = {}
    cases = protocol.cases
    total = sum(_case_calls(c) for c in cases)
    with progress("quadrature", total) as bar:
        for case in cases:
            raw = _run_case(case, kernel, bar)
            files[f"raw/quadrature/{case.name}.json"] = json.dumps(
                raw, sort_keys=True, separators=(",", ":")
            ).encode()
    return files


def _case_calls(case) -> int:
    support = int(np.count_nonzero(case_laws(case)[1]))
    return 2 * support + 2


def _run_case(case, kernel, bar) -> dict:
    p, q, p_bonus = case_laws(case)
    vocab, g = case.vocab, case.grid
    grid = midpoint_grid(g)
    drafts = np.flatnonzero(q > 0)
    p_rows = np.stack([p, p_bonus])[None]  # [1, 2, V]
    q_rows = q[None, None]  # [1, 1, V]

    ensure_uses_uniforms(kernel, p_rows, q_rows, drafts, vocab)  # black-box: refused

    def run(x, lens, uniforms):
        return _accept_chunked(kernel, p_rows, q_rows, x, lens, uniforms, vocab)

    u0, u_other = np.meshgrid(grid, grid, indexing="ij")
    u0, u_other = u0.ravel(), u_other.ravel()
    half = np.full_like(u0, 0.5)
    first, bonus, errors = {}, {}, 0
    for x in drafts:
        n = u0.size
        out = run(np.full(n, x), np.ones(n, np.int64), np.stack([u0, u_other, half], 1))
        first[int(x)] = _count(out.tokens[:, 0])
        errors += int(out.error.sum())
        bar.advance(1)
        out = run(np.full(n, x), np.ones(n, np.int64), np.stack([u0, half, u_other], 1))
        accepted = out.num_accepted == 1
        bonus[int(x)] = _count(out.tokens[accepted, 1])
        errors += int(out.error.sum())
        bar.advance(1)

    out = run(
        np.zeros(g, np.int64),
        np.zeros(g, np.int64),
        np.stack([np.full(g, 0.5), np.full(g, 0.5), grid], 1),
    )
    k0 = _count(out.tokens[:, 0])
    errors += int(out.error.sum())
    bar.advance(1)

    edge = np.array(np.meshgrid(EDGE_UNIFORMS, EDGE_UNIFORMS, EDGE_UNIFORMS)).reshape(3, -1).T
    rows = [(x, lens, u) for x in drafts for lens in (0, 1) for u in edge]
    out = run(
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        np.array([r[2] for r in rows]),
    )
    edge_tokens = []
    for i in range(len(rows)):
        committed = out.tokens[i][out.tokens[i] >= 0]
        edge_tokens.append([int(t) for t in committed])
    errors += int(out.error.sum())
    bar.advance(1)
    return {
        # Raw format 2 (the evaluator names each failing check as its reason; see
        # specconform.kinds.quadrature.evaluate.REASONS_FORMAT). Nothing else changed.
        "format": 2,
        "grid": g,
        "drafts": [int(x) for x in drafts],
        "first_counts": first,
        "bonus_counts": bonus,
        "k0_counts": k0,
        "edge_committed": edge_tokens,
        "edge_uniforms": [list(map(float, r[2])) for r in rows],
        "edge_draft_lens": [r[1] for r in rows],
        "kernel_errors": errors,
    }


def _accept_chunked(kernel, p_rows, q_rows, drafts, lens, uniforms, vocab):
    from specconform.adapters.kernel import KernelOutput

    n = drafts.shape[0]
    chunk = max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))
    parts = []
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        b = e - s
        parts.append(
            kernel.accept(
                np.ascontiguousarray(np.broadcast_to(p_rows, (b,) + p_rows.shape[1:])),
                np.ascontiguousarray(np.broadcast_to(q_rows, (b,) + q_rows.shape[1:])),
                drafts[s:e, None].astype(np.int64),
                lens[s:e].astype(np.int64),
                uniforms[s:e].astype(np.float64),
            )
        )
    return KernelOutput(
        np.concatenate([o.tokens for o in parts]),
        np.concatenate([o.num_accepted for o in parts]),
        np.concatenate([o.error for o in parts]),
    )


def _count(tokens: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(tokens, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts, strict=False)}
