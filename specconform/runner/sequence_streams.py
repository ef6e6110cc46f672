"""The ``streams`` check of a sequence run: no two random draws share a generator counter
(issue 35: every random stream -- draft sampling, acceptance coins, corrections, bonus,
each round, each request -- independent of every other).

White-box and deterministic. A traced rerun of a sample of each covered group's random
requests (``run_requests(trace=True)``; the engine's RNG is request-owned, so a rerun
draws what the run drew) returns, per round, every draw with the (key, counter, word)
its counter-based generator took it from (`StreamDraw`; needs the ``trace`` capability). A
counter-based generator is a bijection of the counter for each key, so two draws are
independent exactly when their (key, counter, word) differ. One comparison per draw,
across the rounds, requests and groups of the test: a mismatch is a draw whose (key,
counter, word) an earlier draw already used, and its example names both draws (group,
request, round, stream, index, key, counter, word). An engine that reports no draws
makes the check not applicable (NO_EVIDENCE), never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.runner.sequence_checks import CheckTally, spread

DEFAULT_REQUESTS = 2  # random requests per group when the test gives no `sample`


@dataclass
class StreamsTally(CheckTally):
    """A CheckTally that remembers every (key, counter, word) seen by its test."""

    seen: dict[tuple, dict] = field(default_factory=dict)


def random_picks(specs: Sequence[RequestSpec], sample: int | None) -> list[int]:
    """Indices of `sample` random requests spread over the group (greedy ones draw
    nothing, so they are not picked)."""
    random = [i for i, r in enumerate(specs) if not r.greedy and r.seed is not None]
    return [random[k] for k in spread(len(random), sample or DEFAULT_REQUESTS)]


def add_draws(tally: StreamsTally, where: dict, record: SequenceRecord) -> bool:
    """Compare every draw of one traced request with those seen before; False when the
    record carries no draws (the engine does not report them)."""
    if record.traces is None or any(tr.draws is None for tr in record.traces):
        return False
    for tr in record.traces:
        for d in tr.draws or ():
            at = {
                **where,
                "round": tr.round,
                "stream": d.stream,
                "index": d.index,
                "key": list(d.key),
                "counter": list(d.counter),
                "word": d.word,
            }
            pair = (d.key, d.counter, d.word)
            first = tally.seen.get(pair)
            if first is None:
                tally.seen[pair] = at
                tally.add(True, at)
            else:
                tally.add(False, {"first": first, "second": at})
    return True


def streams_group(engine, group, specs, tally: StreamsTally, sample, generate, progress) -> bool:
    """The traced rerun of one group's picked requests into `tally`; False when the
    engine returned no draws (the caller records the check not applicable).
    ``generate(engine, group, specs, slots, bar, trace=True)`` is the runner's."""
    picked = random_picks(specs, sample)
    if not picked:
        return True
    sub = [specs[i] for i in picked]
    with progress(f"streams {group.name}", len(sub)) as bar:
        traced = generate(engine, group, sub, group.max_num_seqs, bar, trace=True)
    return all(
        add_draws(tally, {"group": group.name, "request": i}, rec)
        for i, rec in zip(picked, traced, strict=True)
    )
