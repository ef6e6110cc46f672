"""What a request returns: committed tokens and per-round acceptance telemetry."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoundStat:
    """One decode round of one request: drafts proposed and drafts accepted.

    ``drafted`` is the row's draft length L of that round (0 for nospec steps and for
    effective-K=0 rounds); ``accepted`` the number of leading drafts accepted (<= L).
    The round committed ``accepted + 1`` tokens unless the request stopped inside it.
    """

    drafted: int
    accepted: int


@dataclass
class RequestOutput:
    """The result of one request (vLLM-like).

    token_ids: committed tokens, t1 (the prefill's sample) first, at most max_tokens;
        a stop token (EOS or one of stop_token_ids) that finished the request is kept.
    rounds: one RoundStat per decode round after t1 that the request took part in.
    finish_reason: "length" | "stop" | "error" | "abort" (None while running).
    seed: the seed of the request's generator (None for greedy requests).
    """

    request_id: object
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    rounds: list[RoundStat] = field(default_factory=list)
    finish_reason: str | None = None
    seed: int | None = None

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
