"""Write the exact laws of a distribution protocol's engine as a reference.json, once.

Unlike a run's reference (which replays only the prefixes it observed), this replays
*every* possible prefix: p(t1 | prompt), p(t2 | prompt, t1) and q_d(t2 | prompt, t1) for
each t1 in supp p_t1 and draft depth d of the protocol, and p(t3 | prompt, t1, t2) for
each t2 in supp p_t2[t1]. Calibration (bench/calibration_reference.py) samples from it,
so a simulated sample never reaches a prefix without a law. Same serial replay as
`specconform run` (BundledEngine.target_law / draft_law, Sampler.probabilities).

    .venv/bin/python bench/calibration_make_reference.py protocols/ci_gate.yaml \
        --out bench/reference/ci_gate-tiny.json

The tiny preset (ci_gate) takes about a minute on CPU (1 + 20 x 3 + 400 prefixes). A
protocol with another adapter (``engine.adapter: hf``) replays through that adapter's
own ``target_law`` / ``draft_law``; it has no ``raw`` block.

``raw`` (for the exact laws of the engine-only planted bugs, specconform.stats.mutant_laws):
the unfiltered softmax (temperature 1, no top-k/top-p: the law the bundled engine's
``target_default_params`` and ``draft_raw_q`` mutants use) of the target and draft logits
after (prompt, t1), on the union of the filtered supports of that t1 (the mass outside it
is 1 minus their sum); ``p_t3_mass``: the unfiltered target mass on the filtered support
of p(t3 | t1, t2) (``bonus_params``); ``p_t3_off``: p(t3 | t1, x) for the draft-only
tokens x (q_d(x) > 0 = p(x): a stale draft fed back as input, ``async_stale_input``).
For fp32_t2 (small preset) on a GPU host:

    .venv/bin/python bench/calibration_make_reference.py protocols/fp32_t2.yaml \
        --device cuda --out bench/reference/fp32_t2-small.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specconform.adapters.engine import BundledEngine, load_engine
from specconform.protocol.load import apply_overrides, load_protocol
from specconform.runner.distribution import _sparse  # the run's own sparse-law encoding


def full_reference(engine, model, raw_engine=None) -> dict:
    prompt = engine.prompt
    depths = sorted({g.draft_loops for g in model.groups if g.draft_loops is not None})
    ref = {
        "vocab_size": engine.vocab_size,
        "prompt": prompt,
        "p_t2": {},
        "p_t3": {},
        "q_t2": {str(d): {} for d in depths},
        "p_t1": _sparse(engine.target_law(prompt)),
    }
    for t1 in sorted(int(t) for t in ref["p_t1"]):
        p2 = _sparse(engine.target_law(prompt + [t1]))
        ref["p_t2"][str(t1)] = p2
        for d in depths:
            ref["q_t2"][str(d)][str(t1)] = _sparse(engine.draft_law(prompt + [t1], d))
        if model.engine.max_tokens >= 3:
            for t2 in sorted(int(t) for t in p2):
                ref["p_t3"][f"{t1},{t2}"] = _sparse(engine.target_law(prompt + [t1, t2]))
    if raw_engine is not None:
        ref["raw"] = raw_laws(engine, raw_engine, ref, depths, model.engine.max_tokens >= 3)
    return ref


def raw_laws(engine, raw_engine, ref: dict, depths: list[int], with_t3: bool) -> dict:
    """The unfiltered laws of the module docstring's ``raw`` block."""
    prompt = engine.prompt
    raw: dict = {"p_t2": {}, "q_t2": {str(d): {} for d in depths}, "p_t3_mass": {}, "p_t3_off": {}}
    for t1 in sorted(int(t) for t in ref["p_t1"]):
        union = set(ref["p_t2"][str(t1)])
        for d in depths:
            union |= set(ref["q_t2"][str(d)][str(t1)])
        keep = sorted(int(t) for t in union)
        p_raw = raw_engine.target_law(prompt + [t1])
        raw["p_t2"][str(t1)] = {str(t): float(p_raw[t]) for t in keep}
        for d in depths:
            q_raw = raw_engine.draft_law(prompt + [t1], d)
            raw["q_t2"][str(d)][str(t1)] = {str(t): float(q_raw[t]) for t in keep}
        if not with_t3:
            continue
        for t2 in keep:
            key = f"{t1},{t2}"
            if key in ref["p_t3"]:
                support = [int(t) for t in ref["p_t3"][key]]
                p3_raw = raw_engine.target_law(prompt + [t1, t2])
                raw["p_t3_mass"][key] = float(sum(p3_raw[t] for t in support))
            else:  # a draft-only token: only a stale input ever conditions on it
                raw["p_t3_off"][key] = _sparse(engine.target_law(prompt + [t1, t2]))
    return raw


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    loaded = apply_overrides(load_protocol(args.protocol), {"--device": args.device})
    t0 = time.perf_counter()
    spec = loaded.model.engine
    raw_engine = None
    if spec.adapter == "bundled":
        engine = BundledEngine(spec, mutant=None, log=lambda line: None)
        # The same engine with sampling filters off: its laws are the unfiltered softmax
        # (the engine-only planted bugs exist only in the bundled engine).
        unfiltered = spec.model_copy(update={"temperature": 1.0, "top_k": 0, "top_p": 1.0})
        raw_engine = BundledEngine(unfiltered, mutant=None, log=lambda line: None)
    else:  # any adapter: its own serial reference, as `specconform run` replays it
        engine = load_engine(spec, mutant=None, log=lambda line: None)
    ref = full_reference(engine, loaded.model, raw_engine)
    ref["source"] = {
        "protocol": loaded.model.name,
        "protocol_hash": loaded.hash,
        "preset": spec.preset if spec.adapter == "bundled" else None,
        "adapter": spec.adapter,
        "replay": "every possible prefix",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(ref, sort_keys=True, separators=(",", ":")) + "\n")
    off = len(ref["raw"]["p_t3_off"]) if "raw" in ref else 0
    print(
        f"wrote {args.out}: {len(ref['p_t2'])} t1, {len(ref['p_t3'])} (t1, t2), "
        f"{off} draft-only (t1, x) ({time.perf_counter() - t0:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
