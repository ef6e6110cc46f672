"""Phase ranges for torch.profiler: draft, verify and accept of a speculative round.

Off by default: ``phase_begin`` then returns None after one module-global read, so the
rounds pay nothing when nobody profiles (and CUDA Graph capture records no range). A
profiler (specconform's performance worker) calls ``enable(True)`` around its window;
each phase is then a ``torch.profiler.record_function("phase:<name>")`` range, which
the profiler attributes operators and kernels to.

A name with a dot is a sub-phase inside its parent's range (``draft.sample``: the draft
law and its token inside ``draft``; ``verify.probabilities``: the target laws inside
``verify``); readers that know only the parents fold it into the part before the dot
(specconform.kinds.performance.profile), bench/round_profile.py keeps it apart.

Begin/end pairs rather than ``with`` blocks keep the marked code's indentation (and so
its diff) unchanged.
"""

from __future__ import annotations

import torch

_enabled = False


def enable(on: bool) -> None:
    global _enabled
    _enabled = bool(on)


def phase_begin(name: str):
    if not _enabled:
        return None
    scope = torch.profiler.record_function(f"phase:{name}")
    scope.__enter__()
    return scope


def phase_end(scope) -> None:
    if scope is not None:
        scope.__exit__(None, None, None)
