"""Power of a sequence protocol's stochastic tests against each planted bug, from
replications of the real engine (docs/kill-matrix.md, "Sequence protocols").

The PIT tests have no closed-form law under a planted bug, so power comes from R
replications: each replication is the protocol's groups with fresh seeds (offset +
r * stride), all replications of a group generated in one engine call (R times the
requests and R times the slots: each replication still runs under continuous batching
when the protocol's group does), laws from a batched teacher-forced forward (the
reference path batched over sequences; row by row equal to `Sampler.probabilities`,
tests/engine/test_sampling_probabilities.py), then each replication evaluated alone by
the protocol's own evaluator restricted to its stochastic tests. A bug is killed in a
replication when that family's Holm verdict fails. ``none`` (the clean engine) gives
the replicated false-fail rate of the same family. The deterministic checks (trace,
oracle, isolation, greedy equality) are not replicated here: they are one full
`specconform run` per bug (``--full``), since they need no sample size.

    python bench/kill_matrix_sequence.py protocols/ci_sequence.yaml --device cuda \
        --replications 200 --out docs/kill-matrix-sequence.md
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.stats import binomtest

from specconform.kinds.sequence import evaluate_frames
from specconform.kinds.sequence.raw import (
    CROSS_COLUMNS,
    MECH_COLUMNS,
    REQUEST_COLUMNS,
    TOKEN_COLUMNS,
)
from specconform.protocol.load import apply_overrides, load_protocol
from specconform.protocol.schema import SeedPlan
from specconform.protocol.schema_sequence import STOCHASTIC_TYPES
from specconform.runner.sequence_laws import DRAFTED_KINDS, token_slots
from specconform.runner.sequence_requests import build_requests, resolve_prompts
from specconform.stats.crossing import crossing_columns
from specconform.stats.mechanism import mechanism_columns

STRIDE = 1_000_000  # seed distance between replications (groups use seed_offset < it)
CHUNK = 256  # sequences per batched forward


@torch.no_grad()
def batched_logits(model, seqs: list[list[int]], loops: int) -> torch.Tensor:
    """Logits at every position of each sequence, [N, T_max, V] float32: the serial
    reference forward (`LoopedLM.reference_logits`) batched over N right-padded
    sequences; causal attention keeps a row's padding out of its real positions."""
    dev = model.embed_tokens.weight.device
    N, T = len(seqs), max(len(s) for s in seqs)
    ids = torch.zeros((N, T), dtype=torch.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.int64)
    ids = ids.to(dev)
    cache = model.new_cache(N, T)
    pos = torch.arange(T, device=dev).expand(N, T)
    rows = torch.arange(N, device=dev)
    ctx = model.context(pos, rows, cache.max_len, prefix=True)
    return model.logits(model.run_loops(model.embed(ids), 0, loops, cache, ctx))


def law_columns(model, specs, records, depth: int | None):
    """Per token of every request (in request order): cdf_below, p_token, tv (NaN off
    drafted positions), mech_cdf_below, mech_p_token (the runner's mechanism columns:
    specconform.stats.mechanism on the same float64 p and q), cross_p, cross_hit (the
    runner's crossing columns, specconform.stats.crossing, at tokens of top-p requests;
    the tiny preset's V = 512 rows go to the CPU), from batched teacher forcing.
    Returns seven float64 arrays."""
    from engine_under_test.sampling import batched_probabilities

    out_cdf, out_p, out_tv, out_mc, out_mp, out_cp, out_ch = [], [], [], [], [], [], []
    for lo in range(0, len(specs), CHUNK):
        sp, rec = specs[lo : lo + CHUNK], records[lo : lo + CHUNK]
        seqs = [list(s.prompt) + list(r.tokens[:-1]) for s, r in zip(sp, rec, strict=True)]
        full = batched_logits(model, seqs, model.num_loops)
        draft = batched_logits(model, seqs, depth) if depth is not None else None
        sel_b, sel_t, x, temp, topk, topp, drafted, corrected = [], [], [], [], [], [], [], []
        for b, (s, r) in enumerate(zip(sp, rec, strict=True)):
            n = len(r.tokens)
            start = len(s.prompt) - 1
            sel_b += [b] * n
            sel_t += range(start, start + n)
            x += list(r.tokens)
            temp += [s.temperature] * n
            topk += [s.top_k] * n
            topp += [s.top_p] * n
            drafted += [slot.kind in DRAFTED_KINDS for slot in token_slots(r)]
            corrected += [slot.kind == "correction" for slot in token_slots(r)]
        dev = full.device
        bi = torch.as_tensor(sel_b, device=dev)
        ti = torch.as_tensor(sel_t, device=dev)
        args = (
            torch.as_tensor(temp, dtype=torch.float32, device=dev),
            torch.as_tensor(topk, dtype=torch.int64, device=dev),
            torch.as_tensor(topp, dtype=torch.float32, device=dev),
        )
        p = batched_probabilities(full[bi, ti], *args).double()  # [M, V]
        p = p / p.sum(-1, keepdim=True)  # as the runner: float64, renormalised
        xt = torch.as_tensor(x, device=dev)[:, None]
        p_token = p.gather(-1, xt)[:, 0]
        cdf_below = p.cumsum(-1).gather(-1, xt)[:, 0] - p_token
        tv = torch.full_like(p_token, float("nan"))
        mech_c = np.full(p_token.shape[0], np.nan)
        mech_p = np.full(p_token.shape[0], np.nan)
        cross_p = np.full(p_token.shape[0], np.nan)
        cross_hit = np.full(p_token.shape[0], np.nan)
        top_p = np.flatnonzero([0 < tp < 1 and t > 0 for tp, t in zip(topp, temp, strict=True)])
        if top_p.size:
            rows_p = p[torch.as_tensor(top_p, device=dev)].cpu().numpy()  # [P, V] float64
            cross_p[top_p], cross_hit[top_p] = crossing_columns(rows_p, np.asarray(x)[top_p])
        if draft is not None:
            q = batched_probabilities(draft[bi, ti], *args).double()
            q = q / q.sum(-1, keepdim=True)
            mask = torch.as_tensor(drafted, device=dev)
            tv = torch.where(mask, 0.5 * (p - q).abs().sum(-1), tv)
            at = np.flatnonzero(drafted)
            if at.size:
                sel = torch.as_tensor(at, device=dev)
                mech_c[at], mech_p[at] = mechanism_columns(
                    p[sel].cpu().numpy(),  # [D, V] float64
                    q[sel].cpu().numpy(),  # [D, V] float64
                    np.asarray(x)[at],
                    np.asarray(corrected)[at],
                )
        out_cdf.append(cdf_below.clamp_min(0.0).cpu().numpy())
        out_p.append(p_token.cpu().numpy())
        out_tv.append(tv.cpu().numpy())
        out_mc.append(mech_c)
        out_mp.append(mech_p)
        out_cp.append(cross_p)
        out_ch.append(cross_hit)
    arrays = (out_cdf, out_p, out_tv, out_mc, out_mp, out_cp, out_ch)
    return tuple(np.concatenate(a) for a in arrays)


def frames(protocol, group, specs, records, laws, offsets, n: int, rep: int):
    """requests.csv and tokens.csv frames of replication `rep` of one group (its
    requests are specs[rep * n:(rep + 1) * n]; offsets[j] is request j's first token
    row in the law arrays)."""
    cdf, p_tok, tv, mech_c, mech_p, cross_p, cross_hit = laws
    req_rows, tok_rows = [], []
    for i in range(n):
        j = rep * n + i
        s, r, k = specs[j], records[j], offsets[j]
        req_rows.append(
            (group.name, i, group.prompts[i % len(group.prompts)])
            + (-1 if s.seed is None else s.seed - rep * STRIDE,)
            + (s.temperature, s.top_k, s.top_p, s.max_tokens)
            + (" ".join(map(str, s.stop_token_ids)), len(r.tokens), r.finish_reason)
        )
        for t, (x, slot) in enumerate(zip(r.tokens, token_slots(r), strict=True)):
            tok_rows.append(
                (group.name, i, t, int(x), slot.round, slot.position, slot.kind)
                + (slot.drafted, cdf[k + t], p_tok[k + t], tv[k + t])
                + (mech_c[k + t], mech_p[k + t], cross_p[k + t], cross_hit[k + t])
            )
    return (
        pd.DataFrame(req_rows, columns=list(REQUEST_COLUMNS)),
        pd.DataFrame(tok_rows, columns=list(TOKEN_COLUMNS + MECH_COLUMNS + CROSS_COLUMNS)),
    )


def replicate(loaded, mutant: str | None, reps: int, log) -> list[dict]:
    """One verdict of the stochastic family per replication under `mutant`."""
    from specconform.adapters.engine import load_engine

    protocol = loaded.model
    stochastic = dict(loaded.data)
    stochastic["tests"] = [t for t in loaded.data["tests"] if t["type"] in STOCHASTIC_TYPES]
    wanted = {g for t in stochastic["tests"] for g in (t.get("groups") or [])}
    groups = [g for g in protocol.groups if not wanted or g.name in wanted]
    stochastic["groups"] = [
        g for g in loaded.data["groups"] if g["name"] in {x.name for x in groups}
    ]
    engine = load_engine(protocol.engine, mutant=mutant, log=lambda *_: None)
    try:
        prompts = resolve_prompts(protocol, engine)
        model = engine._a._reference_llm().model  # the bundled adapter inside CheckedEngine
        per_rep: list[list[tuple]] = [[] for _ in range(reps)]
        for group in groups:
            n = protocol.group_requests(group)
            specs = []
            for r in range(reps):
                shifted = protocol.model_copy(
                    update={
                        "seeds": SeedPlan(
                            count=protocol.seeds.count, offset=protocol.seeds.offset + r * STRIDE
                        )
                    }
                )
                specs += build_requests(shifted, group, prompts)
            slots = None if group.max_num_seqs is None else group.max_num_seqs * reps
            t0 = time.perf_counter()
            records = engine.run_requests(group, specs, slots)
            laws = law_columns(model, specs, records, group.draft_loops)
            log(
                f"  {mutant or 'none'} {group.name}: {len(specs)} requests, "
                f"{sum(len(r.tokens) for r in records)} tokens in {time.perf_counter() - t0:.1f}s"
            )
            offsets = np.concatenate([[0], np.cumsum([len(x.tokens) for x in records])])
            for r in range(reps):
                per_rep[r].append(frames(protocol, group, specs, records, laws, offsets, n, r))
    finally:
        engine.close()
    # statsmodels' Holm step-down runs gc.collect() on every call; with this process's
    # millions of tuples that is most of the evaluation time: freeze them out of the gc.
    gc.collect()
    gc.freeze()
    out = []
    for r in range(reps):
        req = pd.concat([a for a, _ in per_rep[r]], ignore_index=True)
        tok = pd.concat([b for _, b in per_rep[r]], ignore_index=True)
        ev = evaluate_frames(stochastic, req, tok, {})
        out.append(
            {
                "rep": r,
                "verdict": ev.verdict.verdict,
                "failed": list(ev.verdict.failed),
            }
        )
    return out


def ci99(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.99, method="exact")
    return ci.low, ci.high


def table(results: dict[str, list[dict]], header: str) -> str:
    lines = [
        header,
        "",
        "| planted bug | verdict FAIL rate | 99% CI | tests failing most |",
        "|---|---|---|---|",
    ]
    for name, reps in results.items():
        k = sum(r["verdict"] == "FAIL" for r in reps)
        lo, hi = ci99(k, len(reps))
        counts = pd.Series([t for r in reps for t in r["failed"]], dtype=object).value_counts()
        top = ", ".join(f"{t} ({c})" for t, c in counts.head(3).items()) or "—"
        lines.append(f"| {name} | {k}/{len(reps)} | [{lo:.3f}, {hi:.3f}] | {top} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol")
    ap.add_argument("--device", default=None)
    ap.add_argument("--replications", type=int, default=200)
    ap.add_argument("--mutants", nargs="*", default=None, help="default: every mutant")
    ap.add_argument("--no-clean", action="store_true", help="skip the clean engine's row")
    ap.add_argument("--jsonl", default=None, help="append one line per bug as it finishes")
    ap.add_argument("--from-jsonl", nargs="*", default=None, help="only build the table")
    ap.add_argument("--out", default=None, help="Markdown table")
    args = ap.parse_args(argv)
    from engine_under_test.mutants import MUTANTS

    loaded = apply_overrides(load_protocol(args.protocol), {"--device": args.device})
    header = (
        f"`{args.protocol}`, stochastic tests only "
        f"({loaded.model.verdict.combine} at {loaded.model.verdict.alpha:g}), "
        f"replications per row as shown, device {loaded.model.engine.device}."
    )
    results: dict[str, list[dict]] = {}
    if args.from_jsonl is not None:
        for path in args.from_jsonl:
            for line in Path(path).read_text().splitlines():
                rec = json.loads(line)
                results[rec["mutant"]] = rec["replications"]
    else:
        names = [] if args.no_clean else [None]
        names += args.mutants if args.mutants is not None else sorted(MUTANTS)
        log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        for name in names:
            t0 = time.perf_counter()
            reps = replicate(loaded, name, args.replications, log)
            results[name or "none"] = reps
            log(f"{name or 'none'}: {time.perf_counter() - t0:.1f}s")
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps({"mutant": name or "none", "replications": reps}) + "\n")
    text = table(results, header)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
