"""Probe one committed token of a sequence archive at its request's top-k/top-p threshold.

A committed token the reference gives probability 0 (`out_of_support`) is either a bug
or a filter near-tie: the engine's and the reference's filters decided a token at the
threshold differently within float rounding. This replays the reference's unfiltered law
at the token's prefix (the protocol's bundled engine, CPU) and prints where the token
lies against the filter: its rank, the mass before it (top-p keeps it iff that is below
top_p) and its neighbours, beside the numerics model's law bound.

    python bench/filter_tie_probe.py ARCHIVE.zip --group async_mixed --request 28 --step 86

The protocol is the archive's own protocol.json (its seed offset applied), read as
`specconform replay` reads it.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import replace
from pathlib import Path

import _checkout  # noqa: F401
import numpy as np
import pandas as pd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archive", type=Path)
    ap.add_argument("--group", required=True)
    ap.add_argument("--request", type=int, required=True)
    ap.add_argument("--step", type=int, required=True)
    a = ap.parse_args(argv)

    from specconform.adapters.engine import load_engine
    from specconform.evidence.reader import read_archive
    from specconform.protocol.load import validate
    from specconform.runner.sequence_requests import build_requests, resolve_prompts

    contents = read_archive(a.archive)
    protocol = validate(contents.json_object("protocol.json"), f"{a.archive}: protocol.json")
    tokens = pd.read_csv(io.BytesIO(contents.files["raw/sequence/tokens.csv"]))
    engine = load_engine(protocol.engine, mutant=None, log=lambda *_a, **_k: None)
    try:
        prompts = resolve_prompts(protocol, engine)
        group = next((g for g in protocol.groups if g.name == a.group), None)
        if group is None:
            raise SystemExit(f"--group {a.group}: not a group of {protocol.name}")
        requests = build_requests(protocol, group, prompts)
        if not 0 <= a.request < len(requests):
            raise SystemExit(f"--request {a.request}: {a.group} has {len(requests)} requests")
        req = requests[a.request]
        rows = tokens[(tokens.group == a.group) & (tokens.request == a.request)]
        committed = rows.sort_values("step").token.tolist()
        if not 0 <= a.step < len(committed):
            raise SystemExit(f"--step {a.step}: the request committed {len(committed)} tokens")
        token = int(committed[a.step])
        prefix = list(req.prompt) + committed[: a.step]
        filtered = engine.target_law_for(prefix, req)
        bare = engine.target_law_for(
            prefix, replace(req, temperature=req.temperature or 1.0, top_k=0, top_p=1.0)
        )
    finally:
        engine.close()
    order = np.argsort(-bare.astype(np.float64), kind="stable")
    cum = np.cumsum(bare[order].astype(np.float64))
    rank = int(np.flatnonzero(order == token)[0])
    before = float(cum[rank] - bare[token])
    print(
        f"{a.group} request {a.request} step {a.step}: token {token}, seed {req.seed}, "
        f"T {req.temperature}, top_k {req.top_k}, top_p {req.top_p}"
    )
    print(
        f"reference filtered p = {float(filtered[token]):.6g} (support {(filtered > 0).sum()}); "
        f"unfiltered p = {float(bare[token]):.6g}, rank {rank} (0 = most likely)"
    )
    print(f"mass before it = {before:.10f}; top_p - that = {req.top_p - before:.3e}")
    for i in range(max(0, rank - 2), min(len(order), rank + 3)):
        print(f"  rank {i}: token {int(order[i])} p {float(bare[order[i]]):.6g}")
    numerics = protocol.model_dump(mode="json").get("numerics")
    if numerics:
        from specconform.kinds.sequence.numerics import model_at
        from specconform.runner.filter_ties import token_margin

        model = model_at(numerics, req.temperature)
        top_k, top_p = (1, 1.0) if req.greedy else (req.top_k, req.top_p)
        margin = token_margin(
            bare, token, top_k, top_p, logit_bound=model.logit_bound, law_bound=model.law_bound
        )
        print(f"protocol numerics block: {numerics}")
        print(
            f"filter_margin = {margin:.4g} (law bound {model.law_bound:.3g}, logit bound "
            f"{model.logit_bound:.3g} at T {req.temperature}; <= 1: a near-tie)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
