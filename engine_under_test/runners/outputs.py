"""What a request returns: committed tokens and per-round acceptance telemetry."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RoundStat:
    """One decode round of one request: drafts proposed and drafts accepted.

    ``drafted`` is the row's draft length L of that round (0 for nospec steps and for
    effective-K=0 rounds); ``accepted`` the number of leading drafts accepted (<= L).
    The round committed ``accepted + 1`` tokens unless the request stopped inside it.
    """

    drafted: int
    accepted: int


@dataclass(frozen=True, eq=False)
class RoundTrace:
    """The laws one decode round of one request handed to the accept kernel
    (``LLM.generate(..., trace=True)``; runners/law_trace.py says how they are taken).

    round: the request's own decode-round index, 0-based, as in ``RequestOutput.rounds``.
    prefix_len: committed tokens of the request after the prompt before this round (t1
        included), so the round's input prefix is prompt + token_ids[:prefix_len].
    drafts: the L draft tokens the round proposed (L = rounds[round].drafted).
    p: [L+1, V] float32 the target law at positions 0..L, after the request's
        temperature/top-k/top-p: exactly what the kernel received (position j is the law
        given prefix + drafts[:j]).
    q: [L, V] float32 the draft law the kernel received at positions 0..L-1.
    uniforms: [3K+1] float64 every uniform the round drew for the request, in
        ``DRAW_STREAMS`` order (draft j = 0..K-1, coin j, correction j, bonus), drawn
        whether used or not (consumption never depends on acceptance); zeros for a
        greedy request. None from an engine path that does not trace its draws.
    origins: [3K+1, 7] int64 where each uniform came from: the Philox key's two words,
        the counter's four words and which uniform of the counter's output
        (``sampling.ORIGIN_COLUMNS``); -1 rows for a greedy request (no draw).
    """

    round: int
    prefix_len: int
    drafts: list[int]
    p: np.ndarray  # [L+1, V] float32
    q: np.ndarray  # [L, V] float32
    uniforms: np.ndarray | None = None  # [3K+1] float64
    origins: np.ndarray | None = None  # [3K+1, 7] int64


def draw_streams(k: int) -> list[tuple[str, int]]:
    """(stream, index) of each column of ``RoundTrace.uniforms`` for K = k."""
    return (
        [("draft", j) for j in range(k)]
        + [("coin", j) for j in range(k)]
        + [("correction", j) for j in range(k)]
        + [("bonus", 0)]
    )


@dataclass
class RequestOutput:
    """The result of one request (vLLM-like).

    token_ids: committed tokens, t1 (the prefill's sample) first, at most max_tokens;
        a stop token (EOS or one of stop_token_ids) that finished the request is kept.
    rounds: one RoundStat per decode round after t1 that the request took part in.
    finish_reason: "length" | "stop" | "error" | "abort" (None while running).
    seed: the seed of the request's generator (None for greedy requests).
    trace: None unless ``generate(..., trace=True)``: then one RoundTrace per decode
        round of a block-speculation mode ([] under nospec, whose steps have no drafts;
        t1 has no entry: its law is the serial p at the prompt).
    """

    request_id: object
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    rounds: list[RoundStat] = field(default_factory=list)
    finish_reason: str | None = None
    seed: int | None = None
    trace: list[RoundTrace] | None = field(default=None, compare=False, repr=False)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def first_draft_accepted(self) -> bool | None:
        """Was draft position 0 of the first round after t1 accepted?

        None when that round did not exist or drafted nothing (nospec, max_tokens=1,
        an effective-K=0 round).
        """
        if not self.rounds or self.rounds[0].drafted == 0:
            return None
        return self.rounds[0].accepted >= 1

    @property
    def num_drafted(self) -> int:
        return sum(r.drafted for r in self.rounds)

    @property
    def num_accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        drafted = self.num_drafted
        return self.num_accepted / drafted if drafted else None


@dataclass(frozen=True)
class RequestError:
    """One request that a failed round finished with "error".

    round: the request's own round number: 0 is prefill (t1), n >= 1 the n-th decode
        round after t1 (the round that failed; nothing of it was committed).
    invalid: what was invalid in this request's law at its stop point: "non_finite",
        "zero_mass", "zero_residual" (or "unclassified" from an accept implementation
        that gives no reason); None when its own law was valid and it failed with its
        round (contract 3: an invalid law at any live row fails every live row).
    """

    request_id: object
    round: int
    invalid: str | None


@dataclass(frozen=True)
class FailedRound:
    """One prefill batch or decode round that failed (contract 3)."""

    stage: str  # "prefill" | "decode"
    index: int  # 0-based count of this runner's rounds of that stage
    requests: tuple[RequestError, ...]  # every live request it finished with "error"

    @property
    def causes(self) -> tuple[RequestError, ...]:
        """The requests whose own law was invalid (at least one per failed round)."""
        return tuple(r for r in self.requests if r.invalid is not None)


@dataclass(frozen=True)
class GenerateReport:
    """What one ``LLM.generate`` call ran, engine errors included.

    rounds: decode rounds collected during the call (nospec steps included; prefill
        batches not); failed: every prefill batch or decode round that failed, in the
        order the host collected them. A request that ended in "error" appears in
        exactly one of them.
    """

    rounds: int
    failed: tuple[FailedRound, ...]

    @property
    def num_failed_rounds(self) -> int:
        return len(self.failed)

    @property
    def errors(self) -> tuple[RequestError, ...]:
        return tuple(e for f in self.failed for e in f.requests)

    @property
    def ok(self) -> bool:
        return not self.failed


class GenerateOutputs(list):
    """``LLM.generate``'s result: the list of RequestOutput (input order) with the
    call's ``report`` (a GenerateReport) attached, so callers that only iterate the
    outputs keep working and the errors are one attribute away."""

    def __init__(self, outputs: list[RequestOutput], report: GenerateReport):
        super().__init__(outputs)
        self.report = report
