"""tau (committed tokens per speculative round) of a preset at several (K, d), and the
launch bound each would give (issue 16: which configuration can pay 1.3x at c = 4, 64).

Async block speculation, random sampling as bench/engine_throughput.py samples (T = 1,
top-k 20, per-request seeds), --requests requests of --max-tokens tokens from the
protocols' prompt. tau depends on the model and the sampling, not on the device; the
launch bound uses the kernel counts measured on the H200 (session 6's profile, `small`,
c = 64: N_step = 2,333 kernels a nospec step, 575 a loop pass):

    L_upper(K, d) = tau * N_step / (P * 575),  P = (K + 1) d + (R - d) loop passes a round

an upper bound of async / nospec where both modes are launch-bound (a round's heads,
sampling and accept kernels, 159 at K = 3, d = 2, only lower it; docs/gpu-runs.md
session 7 for L's derivation).

    OMP_NUM_THREADS=1 .venv/bin/python bench/speculation_tau.py --configs 3,2 2,1
"""

from __future__ import annotations

import argparse
import sys
import time

import _checkout  # noqa: F401  (this checkout first on sys.path)
import torch

from engine_under_test import DEFAULT_PROMPT, LLM, SamplingParams, SpeculativeConfig
from engine_under_test.config import ModelConfig
from engine_under_test.model import build_model

N_STEP, KERNELS_PER_PASS = 2333, 575  # H200, small, c = 64 (docs/gpu-runs.md session 6)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--configs", nargs="+", default=["3,2", "3,1", "2,1", "2,2", "4,2"])
    args = ap.parse_args(argv)
    try:
        configs = [tuple(int(x) for x in c.split(",")) for c in args.configs]
    except ValueError:
        ap.error("--configs: each configuration is K,d (e.g. 3,2)")
    torch.set_num_threads(1)
    model = build_model(ModelConfig.preset(args.preset, seed=0), device=args.device)
    R = model.num_loops
    print("| K | d | loop passes P | tau | acceptance | L_upper | rounds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for K, d in configs:
        if not (K >= 1 and 1 <= d < R):
            ap.error(f"--configs {K},{d}: need K >= 1 and 1 <= d < R = {R}")
        llm = LLM(
            model=model,
            speculative_config=SpeculativeConfig(num_speculative_tokens=K, draft_loops=d),
            async_scheduling=True,
            device=args.device,
            max_num_seqs=args.requests,
        )
        params = [
            SamplingParams(
                temperature=1.0,
                top_k=20,
                seed=1000 + s,
                max_tokens=args.max_tokens,
                ignore_eos=True,
            )
            for s in range(args.requests)
        ]
        t0 = time.perf_counter()
        outs = llm.generate([list(DEFAULT_PROMPT)] * args.requests, params)
        rounds = [r for o in outs for r in o.rounds]
        tokens = sum(len(o.token_ids) - 1 for o in outs)  # t1 is the prefill's sample
        tau = tokens / len(rounds)
        acceptance = sum(r.accepted for r in rounds) / sum(r.drafted for r in rounds)
        passes = (K + 1) * d + (R - d)
        bound = tau * N_STEP / (passes * KERNELS_PER_PASS)
        print(
            f"| {K} | {d} | {passes} | {tau:.3f} | {acceptance:.3f} | {bound:.3f} | "
            f"{len(rounds)} ({time.perf_counter() - t0:.0f} s) |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
