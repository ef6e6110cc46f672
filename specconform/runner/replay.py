"""The exact reference laws of a distribution protocol, replayed serially through its own
engine adapter: what `specconform plan` and ``specconform.plan_protocol`` plan against
when no reference file is given (needs torch)."""

from __future__ import annotations

from collections.abc import Callable

from specconform.errors import UsageError


def replay_laws(loaded, *, notify: Callable[[str], None]) -> dict:
    """reference.json-shaped laws of every possible t1 by serial replay through the
    protocol's own engine adapter (bundled, hf or a user's): its p and, when it gives
    one, its q."""
    try:
        import torch
    except ImportError:
        raise UsageError("no torch here: pass --reference ARCHIVE or reference.json") from None
    from specconform.adapters.engine import load_engine

    spec = loaded.model.engine
    if spec.device == "cuda" and not torch.cuda.is_available():
        spec = spec.model_copy(update={"device": "cpu"})
        notify("plan: no CUDA device, replaying the reference laws on CPU")
    engine = load_engine(spec, mutant=None, log=lambda line: None)
    prompt = engine.prompt
    depths = sorted({g.draft_loops for g in loaded.model.groups if g.draft_loops})

    def sparse(law):
        return {str(int(i)): float(law[i]) for i in law.nonzero()[0]}

    ref = {
        "vocab_size": engine.vocab_size,
        "p_t1": sparse(engine.target_law(prompt)),
        "p_t2": {},
        "q_t2": {str(d): {} for d in depths},
        "p_t3": {},
    }
    for t1 in sorted(int(t) for t in ref["p_t1"]):
        ref["p_t2"][str(t1)] = sparse(engine.target_law(prompt + [t1]))
        for d in depths:
            q = engine.draft_law(prompt + [t1], d)  # None: the adapter gives no q
            if q is not None:
                ref["q_t2"][str(d)][str(t1)] = sparse(q)
    engine.close()
    return ref
