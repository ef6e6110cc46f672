"""Random streams are disjoint (issue 35), white-box: every Philox counter a run uses is
used once.

A random request draws, per submitted round, the accept block (coins u[0:K],
corrections u[K:2K], bonus u[2K]) keyed by (seed, round) and the K draft uniforms keyed
by (seed, round + DRAFT_ROUND_OFFSET). Philox is a bijection of (key, counter), so two
draws are independent exactly when their (key, counter) pairs differ, and the coin,
correction and bonus slots of one block are distinct uniforms of distinct or
same-counter words by construction (the layout's indices do not overlap). This test
records every (key, counter) of every Philox evaluation of a run, per stream (draft or
block), round and request, and asserts none is used twice. Deterministic: no α. The
negative controls are the planted ``rng_draft_overlaps_coins`` (the draft domain's offset
dropped: the draft counters are the coins') and ``rng_bonus_overlaps_next_round`` (the
bonus read from the next round's first coin), which must be caught. The black-box side --
that the overlap shows in the committed tokens -- is ci_sequence's (docs/kill-matrix.md).
"""

from __future__ import annotations

import inspect
from collections import Counter

import pytest
import torch

from engine_under_test import LLM, SamplingParams, draw_streams
from engine_under_test.sampling import philox_uniforms
from engine_under_test.sampling import rng as rng_module
from tests.engine.helpers import MODES, PROMPT


def used_counters(model, mode: str, monkeypatch, mutant: str | None = None) -> Counter:
    """Counter of (stream, key0, key1, c0, c1, c2, c3) over every Philox evaluation of
    the random rows (seeds >= 1; unbound and greedy slots read seed 0) of one run."""
    seen: Counter = Counter()
    real = rng_module.philox4x32_10

    def recording(counter, key):  # counter [B, C, 4], key [B, 1, 2] int64
        stream = (
            "draft" if any(f.function == "draft_uniforms" for f in inspect.stack()) else "block"
        )
        c = counter.reshape(-1, counter.shape[-2], 4)
        k = key.reshape(-1, 2)
        for b in range(c.shape[0]):
            k0, k1 = (int(v) for v in k[b])
            if (k0, k1) == (0, 0):
                continue
            for row in c[b].tolist():
                seen[(stream, k0, k1, *row)] += 1
        return real(counter, key)

    monkeypatch.setattr(rng_module, "philox4x32_10", recording)
    params = [
        SamplingParams(temperature=1.0, top_k=20, seed=1 + i, max_tokens=24, ignore_eos=True)
        for i in range(6)
    ] + [SamplingParams(temperature=0.0, max_tokens=24)]  # a greedy row draws nothing
    LLM(model=model, **MODES[mode], mutant=mutant).generate([PROMPT] * 7, params)
    return seen


def reused(seen: Counter) -> list[tuple]:
    """(key, counter) pairs evaluated more than once, across or within streams."""
    by_pair: Counter = Counter()
    for (_stream, *pair), n in seen.items():
        by_pair[tuple(pair)] += n
    return [p for p, n in by_pair.items() if n > 1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_counter_is_used_once(model, mode, monkeypatch):
    seen = used_counters(model, mode, monkeypatch)
    streams = {s for s, *_ in seen}
    assert streams == {"draft", "block"}
    # Every random request's rounds: one key per request, many rounds each.
    assert len({(k0, k1) for _, k0, k1, *_ in seen}) == 6
    assert reused(seen) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("mutant", ["rng_draft_overlaps_coins", "rng_bonus_overlaps_next_round"])
def test_negative_control_overlapping_streams_are_caught(model, mode, mutant, monkeypatch):
    assert len(reused(used_counters(model, mode, monkeypatch, mutant=mutant))) > 0


# --- the trace's draws (generate(trace=True): RoundTrace.uniforms / .origins) ----------


def traced_draws(model, mode: str, mutant: str | None = None):
    """Every traced draw of one run: (request, round, stream, index, origin row, value)."""
    params = [
        SamplingParams(temperature=1.0, top_k=20, seed=1 + i, max_tokens=24, ignore_eos=True)
        for i in range(3)
    ] + [SamplingParams(temperature=0.0, max_tokens=24)]
    outs = LLM(model=model, **MODES[mode], mutant=mutant).generate([PROMPT] * 4, params, trace=True)
    draws = []
    for r, out in enumerate(outs):
        for tr in out.trace:
            assert tr.uniforms is not None and tr.origins is not None
            streams = draw_streams((tr.uniforms.size - 1) // 3)
            for (stream, j), origin, u in zip(streams, tr.origins, tr.uniforms, strict=True):
                draws.append((r, tr.round, stream, j, tuple(int(x) for x in origin), float(u)))
    return draws


def regenerate(origin: tuple[int, ...]) -> float:
    """The uniform Philox gives at one origin row (key words, counter words, word)."""
    k0, k1, c0, c1, c2, _c3, word = origin
    seed = torch.tensor([k0 + (k1 << 32)])
    rnd = torch.tensor([c1 + (c2 << 32)])
    return float(philox_uniforms(seed, rnd, 2 * c0 + 2)[0, 2 * c0 + word])


@pytest.mark.parametrize(
    "mutant", [None, "rng_draft_overlaps_coins", "rng_bonus_overlaps_next_round"]
)
def test_traced_origins_name_the_values_drawn(model, mutant):
    """Each traced uniform equals Philox at the origin the trace names (clean and under
    both overlap mutants: the origins follow the hooks), greedy rows report none."""
    draws = traced_draws(model, "async", mutant)
    random = [d for d in draws if d[0] < 3]
    assert random and all(regenerate(o) == u for *_, o, u in random)
    assert all(o == (-1,) * 7 for r, *_, o, _u in draws if r == 3)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("mutant", "overlaps"),
    [(None, False), ("rng_draft_overlaps_coins", True), ("rng_bonus_overlaps_next_round", True)],
)
def test_traced_origins_are_disjoint_unless_planted(model, mode, mutant, overlaps):
    origins = Counter(o for r, *_, o, _u in traced_draws(model, mode, mutant) if r < 3)
    assert (max(origins.values()) > 1) is overlaps
