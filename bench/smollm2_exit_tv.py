"""First-position TV(p, q) of SmolLM2-135M's early-exit drafts, per exit layer.

For the protocol's prompt (protocols/smollm2_t2.yaml) and each of its likeliest first
tokens t1, the first draft position of the first round predicts t2 from prompt + t1:
this prints TV(p, q_e) there for every exit layer e, with the plain exit head (final
norm + LM head on the shallow state) and the fitted one (model/exit_head.py), under the
protocol's sampling (T = 1, top-k 20), weighted by p(t1), plus the held-out mean over a
second self-written corpus (seed 1, every position, same sampling).

    OMP_NUM_THREADS=1 .venv/bin/python bench/smollm2_exit_tv.py [--layers 20,22,...]
"""

from __future__ import annotations

import argparse
import time

import torch

from engine_under_test import ModelConfig, SamplingParams
from engine_under_test.model import exit_head
from engine_under_test.model.gguf import load_llama_gguf
from engine_under_test.sampling import Sampler

PROMPT = [5965, 20334, 7302, 314]  # "My favourite colour is"
PARAMS = SamplingParams(temperature=1.0, top_k=20)


def tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return float(0.5 * (p - q).abs().sum(-1).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="16,20,22,24,26,27,28,29")
    ap.add_argument("--t1", type=int, default=5, help="likeliest first tokens to condition on")
    args = ap.parse_args()
    layers = [int(x) for x in args.layers.split(",")]
    t0 = time.perf_counter()
    cfg = ModelConfig.packaged("smollm2-135m", stage_layers=(*layers, 30))
    model = load_llama_gguf(cfg)
    t1 = time.perf_counter()
    exit_head.fit_exit_heads(model)
    t2 = time.perf_counter()
    print(
        f"load {t1 - t0:.1f}s, fit {t2 - t1:.1f}s (corpus {exit_head.CORPUS_SEQS} x "
        f"{exit_head.CORPUS_LEN} tokens)"
    )
    law = lambda lg: Sampler.probabilities(lg, PARAMS)  # noqa: E731
    p1 = law(model.reference_logits(PROMPT)[-1])
    top = p1.topk(args.t1)
    held = exit_head.stage_states(model, exit_head.self_written_corpus(model, 16, 24, seed=1))
    maps = dict(model.exit_maps)
    print("layer  plain(t2|t1)  fitted(t2|t1)  plain(held-out)  fitted(held-out)")
    P_held = law(model.logits(held[-1].float()))
    per_t1: dict[int, list[float]] = {}  # exit layer -> fitted TV per t1 (top order)
    for d, e in enumerate(layers, start=1):
        row = []
        for fitted in (False, True):
            model.exit_maps.clear()
            if fitted:
                model.exit_maps[str(d)] = maps[str(d)]
            acc = 0.0
            for w, t in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                ids = PROMPT + [t]
                p = law(model.reference_logits(ids)[-1])
                q = law(model.reference_logits(ids, loops=d)[-1])
                acc += w * tv(p, q)
                if fitted:
                    per_t1.setdefault(e, []).append(tv(p, q))
            row.append(acc / float(top.values.sum()))
        held_plain = tv(P_held, law(model.logits(held[d - 1].float())))
        held_fit = tv(P_held, law(model.exit_logits(held[d - 1].float(), d)))
        print(
            f"{e:5d}  {row[0]:12.3f}  {row[1]:13.3f}  {held_plain:15.3f}  {held_fit:16.3f}",
            flush=True,
        )
        model.exit_maps.clear()
        model.exit_maps.update(maps)
    # Per stratum: the acceptance test's strata are single t1 values, and a usable draft
    # needs every frequent one below ~0.6, not only the p(t1)-weighted mean.
    heads = "  ".join(
        f"t1={t}({w:.2f})" for t, w in zip(top.indices.tolist(), top.values.tolist(), strict=True)
    )
    print(f"fitted TV(p, q) per t1 [p(t1)]: {heads}")
    for e, tvs in per_t1.items():
        print(f"{e:5d}  " + "  ".join(f"{x:.3f}" for x in tvs), flush=True)


if __name__ == "__main__":
    main()
