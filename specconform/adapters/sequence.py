"""What a sequence protocol needs from an engine, beyond the distribution interface.

A sequence protocol sends a group's requests (each with its own prompt, seed, sampling
parameters and length) to the engine in one call, with continuous batching, and then
replays the serial reference law p_t for every committed token's prefix. The methods
below are optional on an engine adapter (`specconform.adapters.engine.EngineAdapter`;
their signatures are stated once, on `specconform.adapters.interface.Engine`);
what an adapter lacks makes the tests that need it "not applicable", never PASS:

- ``run_requests(group, requests, max_num_seqs, trace=False, progress=None)``: run the
  requests to completion, at most ``max_num_seqs`` at once (None: all at once), and
  return one `SequenceRecord` per request in input order. With ``trace=True`` a
  white-box engine also returns, per round, the exact laws it used (`RoundTrace`) and,
  when it can, every random draw's generator (key, counter) (`StreamDraw`);
- ``sequence_laws(request, tokens, draft_depth)``: the laws at every prefix of one
  generation at once (teacher forcing): p_t for prefix ``request.prompt + tokens[:t]``,
  t = 0..T-1, and q_t at ``draft_depth`` when it is not None. The runner checks a
  pre-registered sample of them against ``target_law_for`` (the ``teacher_forcing``
  check) before trusting them;
- ``target_law_for(prefix, request)`` / ``draft_law_for(prefix, request, draft_depth)``:
  the serial reference laws for one prefix under one request's parameters;
- ``target_logits(prefix)``: the raw full-depth logits at the last position of prefix,
  for the independent oracle of the sampling semantics (specconform.stats.oracle);
- ``round_uniforms(request, round, step)``: the uniforms a random request drew for the
  round ``round`` of its events (or, round -1, for the target sample at ``step``), as a
  `RoundUniforms`; lets the token comparisons (isolation) tell a near-tie from a
  mismatch (runner/near_ties.py). Without it every token mismatch fails, as before.

Vocabulary as in `specconform.adapters.engine`: p is the target law, q the draft law;
a round drafts L <= K tokens; positions 0..L-1 hold drafts, position L the bonus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specconform.adapters.types import TokenEvent


@dataclass(frozen=True)
class RequestSpec:
    """One request of a sequence group, as the engine must run it."""

    prompt: tuple[int, ...]
    seed: int | None  # None for a greedy request
    temperature: float  # 0: greedy
    top_k: int  # 0: off
    top_p: float
    max_tokens: int
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class StreamDraw:
    """One random draw of a round, and where the engine's counter-based generator took it
    from (white-box; the ``streams`` check: runner/sequence_streams.py).

    Two draws are independent when their (key, counter, word) differ: a counter-based
    generator (Philox, Threefry) is a bijection of the counter for each key."""

    stream: str  # "draft" | "coin" | "correction" | "bonus" (or an engine's own name)
    index: int  # position within its stream in the round (draft j, coin j, ...; bonus 0)
    key: tuple[int, ...]  # the generator's key words
    counter: tuple[int, ...]  # the counter's words
    word: int  # which output of that counter (e.g. 0 or 1: two uniforms per counter)


@dataclass(frozen=True)
class RoundTrace:
    """The laws one request's round used, as the engine computed them (white-box).

    ``prefix_len`` counts the request's committed tokens (after the prompt) before the
    round, so position j's prefix is prompt + tokens[:prefix_len] + drafts[:j]."""

    round: int
    prefix_len: int
    drafts: tuple[int, ...]  # the L draft tokens of the round
    p: np.ndarray  # [L + 1, V] float32: target law at positions 0..L
    q: np.ndarray  # [L, V] float32: draft law at positions 0..L-1
    # Every random draw of the round; () for a greedy request, None when the engine does
    # not report its draws (the streams check is then not applicable).
    draws: tuple[StreamDraw, ...] | None = None


@dataclass(frozen=True)
class RoundUniforms:
    """The uniforms one request drew for one decision point (white-box engines; issue 32
    near-ties): for a speculative round, draft token j is the inverse CDF of q_j at
    ``draft[j]``, accepted iff ``coin[j] * q_j(x_j) < p_j(x_j)``; a stop at j draws the
    correction from (p_j - q_j)+ at ``correction[j]``, all L accepted the bonus from p_L
    at ``bonus``. A plain target sample (round -1) is the inverse CDF of p at ``target``.
    Lists hold K entries (the engine's num_speculative_tokens)."""

    draft: tuple[float, ...] = ()
    coin: tuple[float, ...] = ()
    correction: tuple[float, ...] = ()
    bonus: float | None = None
    target: float | None = None


@dataclass(frozen=True)
class SequenceRecord:
    """One request's result."""

    tokens: tuple[int, ...]  # committed tokens, t1 first
    finish_reason: str  # "length" | "stop" | "error" | "abort"
    events: tuple[TokenEvent, ...] | None = None  # one per token, when the engine tells
    rounds: tuple[tuple[int, int], ...] | None = None  # per round: (drafted L, accepted)
    traces: tuple[RoundTrace, ...] | None = None  # with trace=True on a white-box engine
