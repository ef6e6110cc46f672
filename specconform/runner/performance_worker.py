"""Timed generations and one profiled window for the performance kind, one process each.

Run as a script (``python performance_worker.py < request.json > result.json``) with
``PYTHONPATH`` naming the tree under test, as ``equality_worker.py`` is: it imports
``engine_under_test`` from *that* tree and never imports specconform, so a base that
predates this script runs. It uses the engine's public API (``LLM``, ``ModelConfig``,
``SamplingParams``, ``SpeculativeConfig``), plus, when the tree has them, the phase
ranges of ``engine_under_test.profiling`` and the runner's ``rounds_run`` counter.

Request (JSON on stdin)::

    {"engine": {"preset", "model_seed", "device", "dtype", "num_speculative_tokens",
                "cuda_graphs"},
     "config": {"mode", "draft_loops"},
     "prompts": [[int, ...], ...],                  # at least max(concurrency) prompts
     "max_tokens": int, "warmup_runs": int, "timed_runs": int,
     "cells": [{"concurrency": int, "sampling": "greedy" | "random"}, ...],
     "profile": null | {"concurrency", "sampling", "warmup_steps", "steps", "top"}}

With ``profile`` the worker only profiles (no timed runs: the profiler's overhead never
reaches a timed number). Result (JSON on stdout)::

    {"device": str, "engine_file": str,
     "cells": [{"concurrency", "sampling", "peak_memory_bytes", "runs": [...]}],
     "profile": {...}}   # the raw profile of specconform.kinds.performance.profile
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict

PHASE_PREFIX = "phase:"
STEP_RANGE = "step"


# Alike in shape to equality_worker.py's _llm on purpose: each worker is a self-contained
# script run with PYTHONPATH naming another tree, so neither imports the other or
# specconform.
def _llm(eut, torch, engine: dict, config: dict, concurrency: int, graphs: bool):
    model = eut.ModelConfig.preset(engine["preset"], seed=int(engine["model_seed"]))
    spec = None
    if config["mode"] != "nospec":
        spec = eut.SpeculativeConfig(
            num_speculative_tokens=int(engine["num_speculative_tokens"]),
            mode="block",
            draft_loops=int(config["draft_loops"]),
        )
    llm = eut.LLM(
        model,
        speculative_config=spec,
        async_scheduling=config["mode"] == "async",
        device=engine["device"],
        dtype=getattr(torch, engine["dtype"]),
        max_num_seqs=concurrency,
        use_cuda_graphs=graphs,
    )
    # An engine that runs a round or prefill shape eagerly for its first uses
    # (GraphedRound.eager_uses) captures at first use here, so the warm-up runs capture
    # every shape the timed runs use; an older base without the attribute captures at
    # first use anyway.
    runner = getattr(llm, "runner", None)
    capture_at_first_use = getattr(runner, "capture_at_first_use", None)
    if capture_at_first_use is not None:  # round and prefill graphs
        capture_at_first_use()
    else:
        graphed = getattr(runner, "graphs", None)
        if graphed is not None and hasattr(graphed, "eager_uses"):
            graphed.eager_uses = 0
    return llm


def _params(eut, sampling: str, n: int, max_tokens: int) -> list:
    if sampling == "greedy":
        return [eut.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)] * n
    return [
        eut.SamplingParams(temperature=1.0, seed=1000 + i, max_tokens=max_tokens, ignore_eos=True)
        for i in range(n)
    ]


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_memory(torch, device: str) -> int:
    """CUDA: max allocated since the last reset; CPU: this process's peak RSS so far."""
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _close(llm) -> None:
    close = getattr(llm, "close", None)  # engines before wave 1's close() lack it
    if close is not None:
        close()


def measure(eut, torch, request: dict) -> list[dict]:
    engine, device = request["engine"], request["engine"]["device"]
    max_tokens = int(request["max_tokens"])
    cells = []
    for cell in request["cells"]:
        c, sampling = int(cell["concurrency"]), cell["sampling"]
        prompts = request["prompts"][:c]
        params = _params(eut, sampling, c, max_tokens)
        llm = _llm(eut, torch, engine, request["config"], c, bool(engine["cuda_graphs"]))
        try:
            # Warm-up: identical untimed runs allocate the KV cache at its final size and
            # capture every graph shape the timed runs replay.
            for _ in range(int(request["warmup_runs"])):
                llm.generate(prompts, params)
            _sync(torch, device)
            if device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            runs = []
            for _ in range(int(request["timed_runs"])):
                runner = getattr(llm, "runner", None)
                rounds0 = getattr(runner, "rounds_run", 0)
                t0 = time.perf_counter()
                outs = llm.generate(prompts, params)
                _sync(torch, device)
                seconds = time.perf_counter() - t0
                if any(o.finish_reason == "error" for o in outs):
                    raise SystemExit(f"c={c} {sampling}: engine error")
                runs.append(
                    {
                        "seconds": seconds,
                        "tokens": sum(len(o.token_ids) for o in outs),
                        "requests": len(outs),
                        "rounds": getattr(runner, "rounds_run", 0) - rounds0,
                    }
                )
            cells.append(
                {
                    "concurrency": c,
                    "sampling": sampling,
                    "peak_memory_bytes": _peak_memory(torch, device),
                    "runs": runs,
                }
            )
        finally:
            _close(llm)
    return cells


def _wrap_collect(runner, torch) -> None:
    """Mark the host's commit of each collected round as phase "collect" (worker side:
    the engine's runners need no range of their own for it)."""
    for name in ("apply_round", "apply_prefill"):
        method = getattr(runner, name, None)
        if method is None:
            continue

        def wrapped(*args, _method=method, **kwargs):
            with torch.profiler.record_function(PHASE_PREFIX + "collect"):
                return _method(*args, **kwargs)

        setattr(runner, name, wrapped)


def _phase_of(evt) -> str | None:
    parent = evt.cpu_parent
    while parent is not None:
        if parent.name.startswith(PHASE_PREFIX):
            return parent.name[len(PHASE_PREFIX) :]
        parent = parent.cpu_parent
    return None


ENGINE_DIR = "engine_under_test/"


NO_STACK = "(no Python stack: the profiler could not decode its frames)"
NO_FRAME = "(no Python frame recorded)"


def _location(evt, with_stack: bool = True) -> str:
    """The innermost engine source line an event ran under: the event itself or the
    nearest enclosing Python function event (``with_stack`` records them, named
    ``file.py(line): function``) inside the engine, else an engine frame of its stack;
    failing both, the innermost Python function (torch's own code, say), and failing
    that NO_FRAME: the trace linked no Python frame to the event at all (seen on the
    H200 with torch 2.11, docs/gpu-runs.md), which is not the same as "outside the
    engine". A window profiled without stack (the fallback of ``profile``) has no
    location at all."""
    if not with_stack:
        return NO_STACK
    outside = None
    node = evt
    while node is not None:
        if ".py(" in node.name:
            if ENGINE_DIR in node.name:
                return ENGINE_DIR + node.name.split(ENGINE_DIR, 1)[1]
            outside = outside or node.name
        node = node.cpu_parent
    for frame in getattr(evt, "stack", None) or []:
        if ENGINE_DIR in frame:
            return ENGINE_DIR + frame.split(ENGINE_DIR, 1)[1]
    return outside or NO_FRAME


def _is_device(evt) -> bool:
    return "CPU" not in str(getattr(evt, "device_type", "CPU"))


def _records(events, device: str, with_stack: bool = True) -> tuple[list[dict], list[dict]]:
    """Aggregate operator events by (phase, name, location); and the phase/step spans."""
    ops: dict[tuple, dict] = defaultdict(
        lambda: {"count": 0, "self_cpu_us": 0.0, "self_device_us": 0.0, "kernels": 0, "copies": 0}
    )
    spans = []
    for evt in events:
        if _is_device(evt):
            continue  # counted through the CPU operator that launched it (evt.kernels)
        if evt.name.startswith(PHASE_PREFIX) or evt.name == STEP_RANGE:
            name = evt.name[len(PHASE_PREFIX) :] if evt.name != STEP_RANGE else STEP_RANGE
            spans.append(
                {"phase": name, "start_us": evt.time_range.start, "end_us": evt.time_range.end}
            )
            continue
        entry = ops[(_phase_of(evt) or "other", evt.name, _location(evt, with_stack))]
        parent = evt.cpu_parent
        top_level = parent is None or not parent.name.startswith("aten::")
        entry["count"] += int(evt.name.startswith("aten::") and top_level)
        entry["self_cpu_us"] += float(evt.self_cpu_time_total)
        kernels = list(getattr(evt, "kernels", []) or [])
        entry["kernels"] += len(kernels)
        copies = sum("memcpy" in k.name.lower() or "memset" in k.name.lower() for k in kernels)
        if not device.startswith("cuda"):
            copies = int(evt.name == "aten::copy_")
        entry["copies"] += copies
        entry["self_device_us"] += float(getattr(evt, "self_device_time_total", 0.0))
    records = [{"phase": k[0], "name": k[1], "location": k[2], **v} for k, v in sorted(ops.items())]
    steps = [s for s in spans if s["phase"] == STEP_RANGE]
    t0 = min((s["start_us"] for s in steps), default=0.0)
    timeline = [
        {
            "phase": s["phase"],
            "start_us": float(s["start_us"] - t0),
            "end_us": float(s["end_us"] - t0),
        }
        for s in spans
        if s["phase"] != STEP_RANGE
    ]
    return records, timeline


def _prime_profiler(torch, activities: list) -> None:
    """A throwaway profiled window before the measured one. ``with_stack`` makes torch's
    Python tracer keep raw pointers into the code objects it saw, and the profiler
    creates and frees code objects itself on first use: ``record_function`` evals a
    class path and ``profile`` imports ``torch.profiler.python_tracer`` (a module's
    top-level code object is freed once it has run). Decoding those dangling names
    later raised ``UnicodeDecodeError`` in CI. After this window nothing in the
    measured one is created for the first time."""
    with torch.profiler.profile(activities=activities, with_stack=True):
        with torch.profiler.record_function(STEP_RANGE):
            torch.zeros(1).add_(1)


def _profiled_window(llm, torch, activities: list, steps: int, device: str, with_stack: bool):
    """Profile ``steps`` engine steps; parse the events at once, before the requests
    drain and the engine closes (either could free code objects the trace points to)."""
    with torch.profiler.profile(activities=activities, with_stack=with_stack) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP_RANGE):
                llm.step()
            _sync(torch, device)
    return _records(prof.events(), device, with_stack)


def profile(eut, torch, request: dict) -> dict:
    spec, engine = request["profile"], request["engine"]
    c, steps = int(spec["concurrency"]), int(spec["steps"])
    # Eager: a CUDA Graph replay hides the ranges the kernels are attributed to.
    llm = _llm(eut, torch, engine, request["config"], c, graphs=False)
    try:
        phases = __import__("engine_under_test.profiling", fromlist=["enable"])
    except ImportError:  # a base tree without phase ranges: everything is "other"
        phases = None
    _wrap_collect(llm.runner, torch)
    # Room for the window twice: the no-stack fallback below profiles a second one.
    budget = (int(spec["warmup_steps"]) + 2 * steps + 2) * (
        int(engine["num_speculative_tokens"]) + 1
    )
    params = _params(eut, spec["sampling"], c, budget)
    for prompt, p in zip(request["prompts"][:c], params, strict=True):
        llm.add_request(None, prompt, p)
    for _ in range(int(spec["warmup_steps"])):
        llm.step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if engine["device"].startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _prime_profiler(torch, activities)
    if phases is not None:
        phases.enable(True)
    with_stack = True
    try:
        try:
            ops, spans = _profiled_window(llm, torch, activities, steps, engine["device"], True)
        except UnicodeDecodeError as err:
            # torch's Python tracer still pointed at a freed code object. The phase
            # ranges are C++ strings and stay exact; only source locations are lost,
            # and the result says so rather than failing the whole run.
            print(
                f"profile: stack decoding failed ({err}); profiling without stack", file=sys.stderr
            )
            with_stack = False
            ops, spans = _profiled_window(llm, torch, activities, steps, engine["device"], False)
    finally:
        if phases is not None:
            phases.enable(False)
    while llm.has_unfinished_requests():
        llm.step()
    _close(llm)
    return {
        "device": "cuda" if engine["device"].startswith("cuda") else "cpu",
        "steps": steps,
        "concurrency": c,
        "sampling": spec["sampling"],
        "top": int(spec["top"]),
        "phase_markers": phases is not None,
        "with_stack": with_stack,
        "ops": ops,
        "spans": spans,
    }


def main() -> None:
    request = json.load(sys.stdin)
    import torch

    import engine_under_test as eut

    torch.manual_seed(0)
    result: dict = {"device": request["engine"]["device"], "engine_file": eut.__file__}
    if request.get("profile"):
        result["profile"] = profile(eut, torch, request)
    else:
        result["cells"] = measure(eut, torch, request)
    json.dump(result, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
