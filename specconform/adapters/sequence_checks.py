"""Output validation of the optional sequence methods (specconform.adapters.sequence).

A mixin of `specconform.adapters.checks.CheckedEngine`: every answer of run_requests,
sequence_laws, target_law_for, draft_law_for and target_logits is checked (types,
shapes, token ranges, telemetry and trace consistency) before the sequence runner uses
it, so a broken adapter is one `AdapterError` line (exit 2), never a verdict. As in
checks.py the checks are structural, never statistical.
"""

from __future__ import annotations

from numbers import Integral
from typing import TYPE_CHECKING, Any

import numpy as np

from specconform.adapters.sequence import (
    RequestSpec,
    RoundTrace,
    RoundUniforms,
    SequenceRecord,
    StreamDraw,
)
from specconform.adapters.types import AdapterError, AdapterInfo

SEQUENCE_METHODS = ("run_requests", "target_law_for", "sequence_laws", "target_logits")
FINISH_REASONS = ("length", "stop", "error", "abort")
# Rows of a [T, V] law block: each sums to 1 within float32 rounding over V entries.
ROW_MASS_TOLERANCE = 1e-4


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


class SequenceChecks:
    """Validated sequence calls; relies on CheckedEngine's _call, _fail, _check_law,
    _check_events, _tokens_in_range, vocab_size, info and _spec."""

    if TYPE_CHECKING:  # provided by CheckedEngine
        _a: Any
        _spec: Any
        info: AdapterInfo
        vocab_size: int

        def _fail(self, what: str) -> AdapterError: ...
        def _call(self, method: str, *args) -> Any: ...
        def _check_law(self, where: str, law) -> np.ndarray: ...
        def _check_events(self, where: str, group, rec) -> None: ...
        def _tokens_in_range(self, where: str, tokens) -> None: ...

    # -- generation -------------------------------------------------------------------
    def run_requests(
        self, group, requests: list[RequestSpec], max_num_seqs, trace=False, progress=None
    ) -> list[SequenceRecord]:
        if not self.info.capabilities.sequence:
            raise self._fail("has no run_requests(): sequence protocols need it")
        records = self._call("run_requests", group, list(requests), max_num_seqs, trace, progress)
        if not isinstance(records, list) or len(records) != len(requests):
            n = len(records) if isinstance(records, list) else type(records).__name__
            raise self._fail(
                f"run_requests({group.name}) returned {n} records for {len(requests)} requests"
            )
        for i, (req, rec) in enumerate(zip(requests, records, strict=True)):
            self._check_sequence_record(f"run_requests({group.name}) request {i}", group, req, rec)
        return records

    def _check_sequence_record(self, where: str, group, req: RequestSpec, rec) -> None:
        fail = self._fail
        if not isinstance(rec, SequenceRecord):
            raise fail(f"{where}: got {type(rec).__name__}, expected a SequenceRecord")
        toks = rec.tokens
        if not isinstance(toks, tuple) or not all(_is_int(t) for t in toks):
            raise fail(f"{where}: tokens must be a tuple of ints")
        if rec.finish_reason not in FINISH_REASONS:
            raise fail(f"{where}: finish_reason {rec.finish_reason!r} not in {FINISH_REASONS}")
        if len(toks) > req.max_tokens or (not toks and rec.finish_reason not in ("error", "abort")):
            raise fail(f"{where}: {len(toks)} tokens, expected 1..{req.max_tokens}")
        self._tokens_in_range(where, toks)
        K = self._spec.num_speculative_tokens
        if rec.rounds is not None:
            for drafted, accepted in rec.rounds:
                if not (_is_int(drafted) and _is_int(accepted) and 0 <= accepted <= drafted <= K):
                    raise fail(
                        f"{where}: round ({drafted}, {accepted}) breaks "
                        f"0 <= accepted <= drafted <= K={K}"
                    )
        if rec.events is not None:
            if rec.rounds is None:
                raise fail(f"{where}: events without rounds")
            self._check_events(where, group, rec)
        if rec.traces is not None:
            for tr in rec.traces:
                self._check_trace(where, tr, K, len(toks))

    def _check_trace(self, where: str, tr, K: int, n_tokens: int) -> None:
        fail = self._fail
        V = self.vocab_size
        if not isinstance(tr, RoundTrace):
            raise fail(f"{where}: traces must hold RoundTrace, got {type(tr).__name__}")
        L = len(tr.drafts)
        if not (0 <= L <= K and 0 <= tr.prefix_len <= n_tokens):
            raise fail(
                f"{where}: trace of round {tr.round}: {L} drafts, prefix_len {tr.prefix_len}"
            )
        self._tokens_in_range(f"{where} trace drafts", tr.drafts)
        if tr.draws is not None and not (
            isinstance(tr.draws, tuple) and all(_is_draw(d) for d in tr.draws)
        ):
            raise fail(
                f"{where}: trace of round {tr.round}: draws must be a tuple of StreamDraw "
                "with int index, word and int tuples key and counter"
            )
        for name, law, rows in (("p", tr.p, L + 1), ("q", tr.q, L)):
            if not isinstance(law, np.ndarray) or law.shape != (rows, V):
                shape = getattr(law, "shape", type(law).__name__)
                raise fail(
                    f"{where}: trace of round {tr.round}: {name} has shape {shape}, "
                    f"expected ({rows}, {V})"
                )

    # -- laws -------------------------------------------------------------------------
    def sequence_laws(self, request: RequestSpec, tokens, draft_depth: int | None):
        """(p [T, V], q [T, V] or None), every row a law; None when not capable."""
        if not self.info.capabilities.sequence_laws:
            return None
        got = self._call("sequence_laws", request, list(tokens), draft_depth)
        if not isinstance(got, tuple) or len(got) != 2:
            raise self._fail("sequence_laws() must return (p, q)")
        p, q = got
        p = self._check_block("sequence_laws() p", p, len(tokens))
        if draft_depth is not None and q is not None:
            q = self._check_block("sequence_laws() q", q, len(tokens))
        return p, (q if draft_depth is not None else None)

    def _check_block(self, where: str, law, T: int) -> np.ndarray:
        fail = self._fail
        V = self.vocab_size
        if not isinstance(law, np.ndarray) or law.dtype not in (np.float32, np.float64):
            raise fail(f"{where}: expected a float32/float64 numpy array")
        if law.shape != (T, V):
            raise fail(f"{where} has shape {law.shape}, expected ({T}, {V})")
        # The row masses first: a NaN or infinite entry makes its row's float64 sum
        # non-finite, so the whole-block isfinite pass (a third of this check's time at
        # V = 49,152) runs only when a sum is, e.g. for float64 entries that overflow it.
        with np.errstate(over="ignore"):  # an overflowing row is reported below
            mass = law.sum(axis=1, dtype=np.float64)
        finite = bool(np.all(np.isfinite(mass))) or bool(np.all(np.isfinite(law)))
        if T and (not finite or law.min() < 0):
            raise fail(f"{where} has negative or non-finite entries")
        if T and np.max(np.abs(mass - 1.0)) > ROW_MASS_TOLERANCE:
            raise fail(f"{where}: a row sums to {mass[np.argmax(np.abs(mass - 1))]:.6g}, not 1")
        return law

    def target_law_for(self, prefix, request: RequestSpec) -> np.ndarray:
        self._tokens_in_range("target_law_for prefix", prefix)
        return self._check_law(
            f"target_law_for(prefix of {len(prefix)})",
            self._call("target_law_for", list(prefix), request),
        )

    def draft_law_for(self, prefix, request: RequestSpec, depth: int) -> np.ndarray | None:
        if not callable(getattr(self._a, "draft_law_for", None)):
            return None
        return self._check_law(
            f"draft_law_for(prefix of {len(prefix)}, {depth})",
            self._call("draft_law_for", list(prefix), request, depth),
        )

    def round_uniforms(self, request: RequestSpec, round: int, step: int):
        """The adapter's RoundUniforms for one decision point, or None when it has no
        round_uniforms() (token mismatches then fail as before) or the request is greedy."""
        if not callable(getattr(self._a, "round_uniforms", None)):
            return None
        got = self._call("round_uniforms", request, int(round), int(step))
        if got is None:
            return None
        K = self._spec.num_speculative_tokens
        lists = (got.draft, got.coin, got.correction) if isinstance(got, RoundUniforms) else ()
        values = [*(x for xs in lists for x in xs), got.bonus, got.target] if lists else []
        if (
            not isinstance(got, RoundUniforms)
            or (round >= 0 and not all(len(xs) == K for xs in lists))
            or not all(x is None or (isinstance(x, float) and 0.0 <= x < 1.0) for x in values)
        ):
            raise self._fail(
                f"round_uniforms() must return RoundUniforms with {K} uniforms in [0, 1)"
            )
        return got

    def target_logits(self, prefix) -> np.ndarray | None:
        """[V] raw logits, or None when not capable."""
        if not self.info.capabilities.logits:
            return None
        x = self._call("target_logits", list(prefix))
        V = self.vocab_size
        if not isinstance(x, np.ndarray) or x.shape != (V,) or x.dtype.kind != "f":
            raise self._fail(f"target_logits() must return a float numpy array of shape ({V},)")
        if np.isnan(x).any():
            raise self._fail("target_logits() has NaN entries")
        return x


def _is_draw(d) -> bool:
    return (
        isinstance(d, StreamDraw)
        and isinstance(d.stream, str)
        and _is_int(d.index)
        and _is_int(d.word)
        and all(isinstance(t, tuple) and all(_is_int(x) for x in t) for t in (d.key, d.counter))
    )
