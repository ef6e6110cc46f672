"""The bundled engine's traced random draws as `StreamDraw`s (the ``streams`` check).

engine_under_test's traced rounds carry the 3K+1 uniforms each round drew and the Philox
(key, counter, word) each came from (``RoundTrace.origins``, columns
``engine_under_test.sampling.ORIGIN_COLUMNS``; ``draw_streams(K)`` names them: draft
j, coin j, correction j, bonus). Kept out of ``bundled.py`` so the adapter module stays
one screen of plumbing.
"""

from __future__ import annotations

from specconform.adapters.sequence import StreamDraw


def engine_streams(eut) -> bool:
    """Whether this engine_under_test's traced rounds carry their random draws
    (``RoundTrace.origins``); an older engine's do not: the streams check is then not
    applicable."""
    fields = getattr(eut.RoundTrace, "__dataclass_fields__", {})
    return "origins" in fields and hasattr(eut, "draw_streams")


def draws(eut, t) -> tuple[StreamDraw, ...] | None:
    """The draws of one engine RoundTrace: every (stream, index) of its uniforms with the
    Philox (key, counter, word) it came from; () for a greedy request (-1 origins)."""
    origins = getattr(t, "origins", None)
    if origins is None:
        return None
    layout = eut.draw_streams((len(origins) - 1) // 3)
    return tuple(
        StreamDraw(stream, j, (int(o[0]), int(o[1])), tuple(int(x) for x in o[2:6]), int(o[6]))
        for (stream, j), o in zip(layout, origins, strict=True)
        if int(o[0]) >= 0
    )
