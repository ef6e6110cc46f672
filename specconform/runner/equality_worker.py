"""Greedy generations for the equality kind, run in a subprocess per source tree.

Run as a script (``python equality_worker.py < request.json > result.json``) with
``PYTHONPATH`` naming the tree under test, so that ``engine_under_test`` is imported from
*that* tree: the candidate's working tree, or the base commit's snapshot. It uses only the
engine's public API (``LLM``, ``ModelConfig``, ``SamplingParams``, ``SpeculativeConfig``:
stable since the first release), never specconform, which keeps it runnable against a base
that predates this script.

Request (JSON on stdin)::

    {"engine": {"preset", "model_seed", "device", "checkpoint"?},
     "max_tokens": int,
     "prompts": [[int, ...], ...],
     "configurations": [{"name", "mode", "draft_loops", "concurrency", "dtype",
                         "num_speculative_tokens"}, ...],
     "gap_requests": [{"key": str, "dtype": str, "prefixes": [[int, ...], ...]}]}
                                  # optional: top-2 gaps of the full-depth law to measure

Result (JSON on stdout)::

    {"outputs": {"<config>": [[int, ...], ...]},    # committed tokens per prompt
     "gaps": {"<key>": [[top1, top2, logp1 - logp2], ...]},
     "engine_file": "<path of the engine package that ran>"}
"""

from __future__ import annotations

import json
import math
import sys


# Alike in shape to performance_worker.py's _llm on purpose: each worker is a self-contained
# script run with PYTHONPATH naming another tree, so neither imports the other or
# specconform.
def _llm(eut, torch, engine: dict, config: dict):
    model = (
        engine["checkpoint"]
        if engine.get("checkpoint")
        else eut.ModelConfig.preset(engine["preset"], seed=int(engine["model_seed"]))
    )
    spec = None
    if config["mode"] != "nospec":
        spec = eut.SpeculativeConfig(
            num_speculative_tokens=int(config["num_speculative_tokens"]),
            mode="block",
            draft_loops=int(config["draft_loops"]),
        )
    return eut.LLM(
        model,
        speculative_config=spec,
        async_scheduling=config["mode"] == "async",
        device=engine["device"],
        dtype=getattr(torch, config["dtype"]),
        max_num_seqs=int(config["concurrency"]),
    )


def _top2_gap(llm, eut, prefix: list[int]) -> list[float]:
    """(top-1 token, top-2 token, log p1 - log p2) of the full-depth law at T = 1 with
    no filtering: the top-2 logit gap, which tells a near-tie from a real change."""
    probs = llm.target_probabilities(prefix, eut.SamplingParams(temperature=1.0))
    top = probs.double().topk(2)
    p1, p2 = (float(v) for v in top.values)
    gap = math.log(p1) - math.log(p2) if p2 > 0 else float("inf")
    return [int(top.indices[0]), int(top.indices[1]), gap]


def _close(llm) -> None:
    close = getattr(llm, "close", None)  # engines before wave 1's close() lack it
    if close is not None:
        close()


def main() -> None:
    request = json.load(sys.stdin)
    import torch

    import engine_under_test as eut

    torch.manual_seed(0)  # greedy decoding draws nothing; fixed anyway
    params = eut.SamplingParams(
        temperature=0.0, max_tokens=int(request["max_tokens"]), ignore_eos=True
    )
    prompts = [list(map(int, p)) for p in request["prompts"]]
    outputs, gaps = {}, {}
    for config in request["configurations"]:
        llm = _llm(eut, torch, request["engine"], config)
        try:
            outs = llm.generate(prompts, params)
            outputs[config["name"]] = [list(map(int, o.token_ids)) for o in outs]
            if any(o.finish_reason == "error" for o in outs):
                raise SystemExit(f"configuration {config['name']}: engine error")
        finally:
            _close(llm)
    for ask in request.get("gap_requests", []):
        config = {"mode": "nospec", "concurrency": 1, "dtype": ask["dtype"]}
        llm = _llm(eut, torch, request["engine"], config)
        try:
            gaps[ask["key"]] = [_top2_gap(llm, eut, list(map(int, p))) for p in ask["prefixes"]]
        finally:
            _close(llm)
    json.dump(
        {"outputs": outputs, "gaps": gaps, "engine_file": eut.__file__}, sys.stdout, sort_keys=True
    )


if __name__ == "__main__":
    main()
