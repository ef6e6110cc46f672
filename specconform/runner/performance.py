"""Performance runner: the A/B in ABBA order over worker processes, then one profiled
window per side.

Sides and trees come from the equality runner (``SourceTree``, ``candidate_tree``,
``base_tree`` for ``--base-ref``, ``run_worker``): without a base ref both sides run in
this tree with the protocol's two configurations; with one, both run the candidate's
configuration, the base in the snapshot of REF. Each process is a fresh
``performance_worker.py`` (interpreter, engine, allocator and caches): processes, not
runs, are the replicates whose spread the report shows. Processes start one at a time
in the order A B B A A B ..., so slow drift of the machine hits both sides alike.

The profiled windows run after every timed process, in their own processes, so the
profiler never slows a timed run. The archive gets ``raw/performance.json`` (what the
evaluator and ``verify`` read) and ``plots/timeline-<sampling>-c<C>.svg``.
"""

from __future__ import annotations

import json

import numpy as np

from specconform.kinds.performance.evaluate import RAW_FILE, SIDES, abba_order
from specconform.kinds.performance.profile import timeline_svg
from specconform.runner.equality import base_tree, candidate_tree, run_worker

WORKER_NAME = "performance_worker.py"


def _worker():
    from pathlib import Path

    return Path(__file__).with_name(WORKER_NAME)


def _describe(config: dict, tree) -> str:
    """'async d=2 @ 1a2b3c4d5e6f' (the tree's commit, '+dirty' when it had changes)."""
    mode = config["mode"] + (f" d={config['draft_loops']}" if config.get("draft_loops") else "")
    commit = (tree.commit or "no commit")[:12] + ("+dirty" if tree.dirty else "")
    return f"{mode} @ {commit}"


def make_prompts(protocol) -> list[list[int]]:
    """max(concurrency) prompts of `prompt_length` ids from PCG64(prompt_seed), the same
    on both sides."""
    from engine_under_test import ModelConfig

    engine = protocol.engine
    vocab = ModelConfig.preset(engine.preset, seed=engine.model_seed).vocab_size
    count = max([*protocol.concurrency, protocol.profile.concurrency if protocol.profile else 1])
    rng = np.random.Generator(np.random.PCG64(protocol.prompt_seed))
    return rng.integers(0, vocab, size=(count, protocol.prompt_length)).tolist()


def collect(loaded, *, progress, log, context) -> dict[str, bytes]:
    protocol = loaded.model
    candidate = candidate_tree()
    trees = {
        "candidate": candidate,
        "base": base_tree(protocol.base_ref) if protocol.base_ref else candidate,
    }
    configs = {
        "candidate": protocol.candidate.model_dump(mode="json"),
        "base": (protocol.candidate if protocol.base_ref else protocol.base).model_dump(
            mode="json"
        ),
    }
    context.outputs.add_run_fields(
        performance_sides={side: _describe(configs[side], trees[side]) for side in SIDES}
    )
    engine = protocol.engine.model_dump(mode="json")
    prompts = make_prompts(protocol)
    cells = [
        {"concurrency": c, "sampling": s} for c in protocol.concurrency for s in protocol.sampling
    ]
    common = {"engine": engine, "prompts": prompts, "max_tokens": protocol.max_tokens}
    order = abba_order(protocol.processes)
    seen = dict.fromkeys(SIDES, 0)
    processes, entries = [], []
    profiled = 2 if protocol.profile else 0
    with progress("processes", len(order) + profiled) as bar:
        for side in order:
            request = {
                **common,
                "config": configs[side],
                "warmup_runs": protocol.warmup_runs,
                "timed_runs": protocol.timed_runs,
                "cells": cells,
                "profile": None,
            }
            result = run_worker(trees[side], request, _worker())
            entry = {"side": side, "process": seen[side]}
            processes.append({**entry, "device": result["device"], "cells": result["cells"]})
            entries.append(entry)
            seen[side] += 1
            bar.advance(1)
        log(f"{len(order)} processes in ABBA order: {' '.join(s[0].upper() for s in order)}")
        profiles = {}
        if protocol.profile:
            spec = protocol.profile.model_dump(mode="json")
            for side in SIDES:
                request = {**common, "config": configs[side], "profile": spec, "cells": []}
                profiles[side] = run_worker(trees[side], request, _worker())["profile"]
                bar.advance(1)
    raw = {
        "order": entries,
        "sides": {
            side: {**trees[side].provenance(), "configuration": configs[side]} for side in SIDES
        },
        "processes": processes,
    }
    files = {}
    if profiles:
        raw["profile"] = profiles
        spec = protocol.profile
        name = f"plots/timeline-{spec.sampling}-c{spec.concurrency}.svg"
        title = (
            f"{spec.steps} steps of {spec.concurrency} request(s), {spec.sampling}: "
            f"base ({configs['base']['mode']}) above candidate ({configs['candidate']['mode']})"
        )
        files[name] = timeline_svg(profiles, title=title).encode()
    files[RAW_FILE] = json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()
    return files
