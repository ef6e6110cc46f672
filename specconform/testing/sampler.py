"""`assert_sampler_exact`: a user's speculative accept function commits tokens from the
target law, checked with specconform's own kernel protocols.

Two checks, the same code as `specconform run protocols/quadrature.yaml` and
`protocols/montecarlo.yaml` (runner.quadrature / runner.montecarlo collect, the kinds'
evaluators decide):

- quadrature (white-box: the function takes its uniforms as input): the exact output law
  integrated over a grid of the uniforms must equal p within the grid's bound; no alpha;
- Monte Carlo: ragged multi-draft rows with drafts x_j ~ q_j and uniforms from numpy's
  PCG64 keyed by (seed, case index); Pearson χ² of the joint accept/reject cells and the
  bonus law at every position, Bonferroni over all tests at `alpha`.

The accept function has the bundled kernel's signature, on numpy arrays::

    accept(p,          # [B, K+1, V] float32 target laws
           q,          # [B, K, V] float32 draft laws
           drafts,     # [B, K] int64 draft tokens
           draft_lens, # [B] int64 drafts in use per row (0..K)
           uniforms,   # [B, 2K+1] float64: K accept coins, K correction draws, 1 bonus draw
           ) -> (tokens [B, K+1] int64 -1 padded, num_accepted [B] int64, error [B] bool)

returning a tuple or any object with those three attributes (torch tensors are accepted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specconform.api.stats import detectable_tv
from specconform.details.cases import QuadratureCaseDetail
from specconform.testing.records import COLLECTOR, CheckRecord, fail_message
from specconform.util.progress import silent

# Small but sharp defaults: each takes well under a second with the bundled kernel on
# CPU; the partial-overlap and ragged cases separate every planted kernel bug.
QUADRATURE_CASES: tuple[dict[str, Any], ...] = (
    {
        "name": "partial_overlap",
        "vocab": 8,
        "grid": 64,
        "p": [0.40, 0.30, 0.20, 0.10, 0, 0, 0, 0],
        "q": [0.10, 0.20, 0.30, 0, 0.40, 0, 0, 0],
    },
    {
        "name": "disjoint_supports",
        "vocab": 8,
        "grid": 64,
        "p": [0.5, 0.3, 0.2, 0, 0, 0, 0, 0],
        "q": [0, 0, 0, 0.4, 0.3, 0.2, 0.1, 0],
    },
    {
        "name": "identical_laws",
        "vocab": 6,
        "grid": 64,
        "p": [0.3, 0.25, 0.2, 0.15, 0.05, 0.05],
        "q": [0.3, 0.25, 0.2, 0.15, 0.05, 0.05],
    },
)
MONTECARLO_CASES: tuple[dict[str, Any], ...] = (
    {
        "name": "single_draft",
        "vocab": 16,
        "K": 1,
        "draft_lens": [1],
        "law_seed": 1,
        "p_support": 12,
        "q_support": 10,
    },
    {
        "name": "ragged_k3",
        "vocab": 16,
        "K": 3,
        "draft_lens": [0, 1, 2, 3, 3],
        "law_seed": 2,
        "p_support": 12,
        "q_support": 10,
        "concentration": 2.0,
    },
)
POWER = 0.8


class _UserKernel:
    """Adapts a user's accept function to the kernel interface the runners call."""

    def __init__(self, accept_fn: Callable[..., Any]):
        self._fn = getattr(accept_fn, "accept", accept_fn)
        self.name = getattr(self._fn, "__qualname__", repr(self._fn))

    def accept(self, p, q, drafts, draft_lens, uniforms):
        from specconform.adapters.kernel import KernelOutput

        out = self._fn(p, q, drafts, draft_lens, uniforms)
        if isinstance(out, tuple):
            tokens, accepted, error = out[:3]
        else:
            tokens, accepted, error = out.tokens, out.num_accepted, out.error
        tokens, accepted, error = (_numpy(x) for x in (tokens, accepted, error))
        b, k1 = drafts.shape[0], drafts.shape[1] + 1
        if tokens.shape != (b, k1) or accepted.shape != (b,) or error.shape != (b,):
            raise ValueError(
                f"accept returned tokens {tokens.shape}, num_accepted "
                f"{accepted.shape}, error {error.shape}; expected ({b}, {k1}), "
                f"({b},), ({b},)"
            )
        return KernelOutput(tokens.astype(np.int64), accepted.astype(np.int64), error.astype(bool))


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def assert_sampler_exact(
    accept_fn: Callable[..., Any],
    *,
    cases: Sequence[dict[str, Any]] | None = None,
    alpha: float = 0.01,
    rows: int = 20_000,
    seed: int = 0,
    methods: Sequence[str] = ("quadrature", "montecarlo"),
) -> list[CheckRecord]:
    """Assert that `accept_fn` implements exact speculative sampling.

    Parameters
    ----------
    accept_fn : callable
        See the module docstring for the signature (white-box: uniforms are inputs).
    cases : sequence of dict, optional
        Protocol cases: with ``K``/``draft_lens`` a Monte Carlo case, otherwise a
        quadrature case (``vocab``, ``p``, ``q``, ``grid``), exactly as in
        protocols/quadrature.yaml and montecarlo.yaml. Default: QUADRATURE_CASES and
        MONTECARLO_CASES.
    alpha : float
        Family-wise false-fail rate of the Monte Carlo part (Bonferroni over its tests);
        the quadrature part is deterministic.
    rows : int
        Monte Carlo rows per case.
    seed : int
        Offset of the PCG64 streams (fixed: the same call gives the same verdict).
    methods : sequence of {"quadrature", "montecarlo"}

    Returns
    -------
    list of CheckRecord
        One per test row.

    Raises
    ------
    AssertionError
        A test fails; the message gives statistic, df, p, n, seeds and detectable TV of
        every failing row.
    """
    from specconform.protocol.load import validate

    chosen = list(cases) if cases is not None else [*QUADRATURE_CASES, *MONTECARLO_CASES]
    # method (a kernel kind of the kind table) -> its protocol document and seed statement;
    # a case with K drafts is a Monte Carlo case, one without a quadrature case.
    quad = [dict(c) for c in chosen if "K" not in c]
    mc = [dict(c) for c in chosen if "K" in c]
    documents: dict[str, tuple[list[dict], dict[str, Any], str]] = {
        "quadrature": (
            quad,
            {"kind": "quadrature", "name": "assert-sampler-exact", "cases": quad},
            "none (deterministic grid)",
        ),
        "montecarlo": (
            mc,
            {
                "kind": "montecarlo",
                "name": "assert-sampler-exact",
                "alpha": alpha,
                "seeds": {"count": int(rows), "offset": int(seed)},
                "cases": mc,
            },
            f"PCG64(({seed}, case index)), {rows} rows per case",
        ),
    }
    unknown = set(methods) - set(documents)
    if unknown:
        raise ValueError(f"methods: unknown {sorted(unknown)}")
    kernel = _UserKernel(accept_fn)
    records: list[CheckRecord] = []
    for method, (method_cases, document, seeds) in documents.items():
        if method in methods and method_cases:
            model = validate(document, "assert_sampler_exact(cases=...)")
            records += _run(model, kernel, method, seeds)
    if not records:
        raise ValueError("assert_sampler_exact: no case to run for the chosen methods")
    if not all(r.passed for r in records):
        __tracebackhide__ = True  # the test's frame is the one to show, not specconform's
        raise AssertionError(
            fail_message(
                "assert_sampler_exact",
                records,
                f"{kernel.name} does not sample exactly ({sum(not r.passed for r in records)} "
                f"of {len(records)} checks failed)",
            )
        )
    return records


def _run(model, kernel: _UserKernel, kind: str, seeds: str) -> list[CheckRecord]:
    from specconform.kinds.registry import kind_of
    from specconform.results import RawData

    # The kernel kinds' own collector and evaluator, from the kind table.
    entry = kind_of(kind)
    raw = entry.collect.load()(model, kernel, silent)
    evaluation = entry.evaluate_protocol(model.model_dump(mode="json"), RawData(raw))
    out = []
    for row in evaluation.tests:
        detail = row.detail
        if isinstance(detail, QuadratureCaseDetail):
            note = (
                f"max |law error| first {detail.max_abs_error_first:.3g} "
                f"(bound {detail.bound_first:.3g}), bonus "
                f"{detail.max_abs_error_bonus:.3g}, K=0 "
                f"{detail.max_abs_error_k0:.3g}; zero-mass commits "
                f"{detail.zero_mass_commits}, kernel errors {detail.kernel_errors}"
            )
            dtv = None
        else:
            note = ""
            dtv = (
                detectable_tv(row.n, int(row.df), row.alpha, POWER)
                if row.df and row.pvalue is not None
                else None
            )
        out.append(
            COLLECTOR.add(
                CheckRecord(
                    check="assert_sampler_exact",
                    name=f"{kind}:{row.test}",
                    passed=row.passed is not False,
                    statistic=row.statistic,
                    df=row.df,
                    pvalue=row.pvalue,
                    n=row.n,
                    alpha=row.alpha,
                    seeds=seeds,
                    detectable_tv=dtv,
                    note=note,
                )
            )
        )
    return out
