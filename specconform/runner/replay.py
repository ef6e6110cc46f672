"""Exact reference laws replayed serially through a protocol's own engine adapter:

- :func:`replay_reference`: a distribution run's reference.json, for the prefixes its
  samples reached (the fixed-N and the sequential runner);
- :func:`replay_laws`: every possible first token's laws, what `specconform plan` and
  ``specconform.plan_protocol`` plan against when no reference file is given.

Both need torch (through the engine).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from specconform.util.errors import UsageError


def replay_laws(loaded, *, notify: Callable[[str], None], progress=None) -> dict:
    """reference.json-shaped laws of every possible t1 by serial replay through the
    protocol's own engine adapter (bundled, hf or a user's): its p and, when it gives
    one, its q. Kept in the law cache (specconform.planning.law_cache): a second call
    for the same protocol, engine code and torch reads them back in well under a second.
    ``progress``: a specconform.util.progress-style factory (default: its bar or log lines)."""
    try:
        import torch
    except ImportError:
        raise UsageError("no torch here: pass --reference ARCHIVE or reference.json") from None
    from specconform.planning import law_cache

    spec = loaded.model.engine
    if spec.device == "cuda" and not torch.cuda.is_available():
        spec = spec.model_copy(update={"device": "cpu"})
        notify("plan: no CUDA device, replaying the reference laws on CPU")
    depths = sorted({g.draft_loops for g in loaded.model.groups if g.draft_loops})
    key = law_cache.law_key(
        loaded.hash, spec.model_dump(mode="json"), depths, str(torch.__version__)
    )
    cached = law_cache.load(key, notify)
    if cached is not None:
        notify(f"plan: reference laws from the cache {law_cache.entry_path(key)}")
        return cached
    ref = _replay_laws(spec, depths, progress or _default_progress(), notify)
    where = law_cache.store(key, ref, notify)
    if where is not None:
        notify(f"plan: reference laws cached in {where}")
    return ref


def _default_progress():
    from specconform.util.progress import progress

    return progress


def _replay_laws(spec, depths: list[int], progress, notify) -> dict:
    """The serial replay itself: p(t1), then p(t2 | t1) and q_d(t2 | t1) for every t1 of
    positive mass, one prefix at a time (what the plan has always used)."""
    from specconform.adapters.engine import load_engine

    notify("plan: building the engine and replaying p(t1)")
    engine = load_engine(spec, mutant=None, log=lambda line: None)
    try:
        prompt = engine.prompt
        ref: dict = {
            "vocab_size": engine.vocab_size,
            "p_t1": _sparse(engine.target_law(prompt)),
            "p_t2": {},
            "q_t2": {str(d): {} for d in depths},
            "p_t3": {},
        }
        t1s = sorted(int(t) for t in ref["p_t1"])
        with progress("reference laws", len(t1s) * (1 + len(depths))) as bar:
            for t1 in t1s:
                ref["p_t2"][str(t1)] = _sparse(engine.target_law(prompt + [t1]))
                bar.advance(1)
                for d in depths:
                    q = engine.draft_law(prompt + [t1], d)  # None: the adapter gives no q
                    if q is not None:
                        ref["q_t2"][str(d)][str(t1)] = _sparse(q)
                    bar.advance(1)
    finally:
        engine.close()
    return ref


def _sparse(law) -> dict[str, float]:
    return {str(int(i)): float(law[i]) for i in law.nonzero()[0]}


def replay_reference(
    engine, model, samples: pd.DataFrame, progress, known: dict | None = None, *, t3: bool = True
) -> dict:
    """Exact laws of the serial reference (batched where the adapter offers a batched path
    that CheckedEngine holds equal to the one-prefix one): p(t1 | prompt), p(t2 | prompt,
    t1) and q_d(t2 | prompt, t1) for every observed t1 and draft depth, p(t3 | prompt,
    t1, t2) for every observed (t1, t2) (``t3=False``: not yet).

    ``known``: a reference built by an earlier call (a sequential run replays after every
    batch): only the prefixes it lacks are replayed, and it is extended in place."""
    prompt = engine.prompt
    depths = sorted({g.draft_loops for g in model.groups if g.draft_loops is not None})
    caps = engine.info.capabilities
    if not caps.draft_law:
        depths = []  # no q: the tests that need it are not applicable (capabilities say why)
    ref = known if known is not None else {}
    if not ref:
        ref.update(
            {
                "vocab_size": engine.vocab_size,
                "prompt": prompt,
                "p_t2": {},
                "p_t3": {},
                "q_t2": {str(d): {} for d in depths},
                "capabilities": caps.to_json(),
            }
        )
    t1s = sorted(
        int(t) for t in samples["t1"].unique() if t >= 0 and str(int(t)) not in ref["p_t2"]
    )
    pairs = []
    if t3 and model.engine.max_tokens >= 3:
        pairs = sorted(
            {
                (int(a), int(b))
                for a, b in zip(samples["t1"], samples["t2"], strict=False)
                if a >= 0 and b >= 0 and f"{int(a)},{int(b)}" not in ref["p_t3"]
            }
        )
    total = ("p_t1" not in ref) + len(t1s) * (1 + len(depths)) + len(pairs)
    with progress("reference", max(total, 1)) as bar:
        if "p_t1" not in ref:
            ref["p_t1"] = _sparse(engine.target_law(prompt))
            bar.advance(1)
        prefixes = [prompt + [t1] for t1 in t1s]
        laws = engine.target_laws(prefixes) if t1s else []
        for t1, law in zip(t1s, laws, strict=True):
            ref["p_t2"][str(t1)] = _sparse(law)
            bar.advance(1)
        for d in depths:
            for t1, law in zip(t1s, engine.draft_laws(prefixes, d) if t1s else [], strict=True):
                ref["q_t2"][str(d)][str(t1)] = _sparse(law)
                bar.advance(1)
        if pairs:
            laws = engine.target_laws([prompt + [t1, t2] for t1, t2 in pairs])
            for (t1, t2), law in zip(pairs, laws, strict=True):
                ref["p_t3"][f"{t1},{t2}"] = _sparse(law)
                bar.advance(1)
    if t3 and depths:
        offender_draft_laws(engine, model, samples, ref, depths)
    return ref


def offender_draft_laws(engine, model, samples: pd.DataFrame, ref: dict, depths) -> None:
    """q of every observed t3 the reference gives probability 0 (out of support), at its
    group's draft depth, so the diagnosis states q beside p = 0 (issue 36): under
    ``q_t3_offenders[d]["t1,t2"][t3]``. Only offending tokens are kept; a correct engine
    has none, and its reference.json has no such key."""
    if not {"group", "t1", "t2", "t3"} <= set(samples.columns):
        return  # the caller passed only the observed prefixes: no t3 to check
    depth_of = {g.name: g.draft_loops for g in model.groups if g.draft_loops in depths}
    wanted: dict[int, dict[str, set[int]]] = {}
    columns = (samples[c].to_numpy() for c in ("group", "t1", "t2", "t3"))
    for group, t1, t2, t3 in zip(*columns, strict=True):
        d = depth_of.get(str(group))
        if d is None or min(t1, t2, t3) < 0:
            continue
        key = f"{int(t1)},{int(t2)}"
        law = ref["p_t3"].get(key)
        if law is not None and str(int(t3)) not in law:
            wanted.setdefault(int(d), {}).setdefault(key, set()).add(int(t3))
    for d, prefixes in sorted(wanted.items()):
        keys = sorted(prefixes)
        laws = engine.draft_laws([engine.prompt + [int(x) for x in k.split(",")] for k in keys], d)
        block = ref.setdefault("q_t3_offenders", {}).setdefault(str(d), {})
        for key, law in zip(keys, laws, strict=True):
            block[key] = {
                str(t): float(law[t]) if 0 <= t < len(law) else 0.0 for t in sorted(prefixes[key])
            }
