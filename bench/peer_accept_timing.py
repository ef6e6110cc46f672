"""Benchmark: each peer's speculative accept kernel beside the bundled engine's
`speculative_accept`, on the same p, q, drafts, draft lengths and uniforms.

Peers (specconform/adapters/peers, docs/peers.md): vLLM's RejectionSampler.forward
(black-box, with its bonus Sampler and metadata) and its rejection_random_sample_kernel
(white-box), SGLang's chain_speculative_sampling_triton (white-box coins), FlashInfer's
chain_speculative_sampling (CUDA only). Each is timed through its specconform adapter,
so the numbers include the adapter's host work (numpy -> torch, per-draft-length calls,
the result copied back): what a protocol run pays per call, not the bare kernel. The
bundled engine is timed the same way (specconform.adapters.kernel.BundledKernel). Steady
state: --warmup calls, then --calls calls, median wall time per call; on CUDA each call
ends with the result on the host (a synchronisation). Ratios are peer / bundled from the
same process. A peer that is not installed is listed as such; nothing is asserted.

    python bench/peer_accept_timing.py --device cuda --rows 4096 --vocab 32000 --draft-k 4
    TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 \
        python bench/peer_accept_timing.py --device cpu --rows 64 --vocab 64 --calls 3

On CPU the peers' Triton kernels run in Triton's interpreter (one Python-level program per
row, tens of ms a row): the CPU numbers say what a protocol run costs there, not how fast
the kernels are.

``--kernel-only`` times the kernels themselves (issues 33, 38): each adapter's
``staged(p, q, drafts, uniforms)`` copies the inputs to the device once (every row at the
full draft length K) and returns a zero-argument call that allocates the outputs and
launches the kernel, leaving the result on the device; calls run back to back and are
timed with CUDA events (perf_counter on CPU), mean per call over --calls. vLLM's
``accept_kernel`` then excludes its recovered-token sampling (the adapter precomputes
those tokens: white-box), ``forward`` is vLLM's whole step from logits (softmax, bonus
sampler, top-k/top-p rows on CUDA); the bundled ``speculative_accept`` takes p and q and
draws everything itself:

    python bench/peer_accept_timing.py --device cuda --rows 4096 --vocab 32000 --draft-k 4 \
        --kernel-only --calls 50
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time

import numpy as np

PEERS = (
    ("vllm.forward", "specconform.adapters.peers.vllm", "forward"),
    ("vllm.accept_kernel", "specconform.adapters.peers.vllm", "accept_kernel"),
    ("sglang.chain", "specconform.adapters.peers.sglang", "chain"),
    ("flashinfer.chain", "specconform.adapters.peers.flashinfer", "chain"),
)


DISTINCT_ROWS = 256


def inputs(rows: int, K: int, vocab: int, seed: int):
    """Ragged batch: Dirichlet(1) laws per row and position (normalised float32
    exponentials), drafts ~ q by inverse CDF, lengths 1..K. At most DISTINCT_ROWS distinct
    rows, repeated to ``rows`` (a kernel's time does not depend on whether rows repeat),
    so that the H100 sizes (4,096 x 5 x 49,152: 4 GB of p) take seconds, not the 40 s
    that vectorised float64 Dirichlet draws took (speed_at_bound's peers part timed out
    on them, docs/gpu-runs.md)."""
    if rows > DISTINCT_ROWS:
        p, q, drafts, _, uniforms = inputs(DISTINCT_ROWS, K, vocab, seed)
        reps = -(-rows // DISTINCT_ROWS)
        p, q, drafts, uniforms = (
            np.tile(a, (reps,) + (1,) * (a.ndim - 1))[:rows] for a in (p, q, drafts, uniforms)
        )
        return p, q, drafts, (np.arange(rows) % K + 1).astype(np.int64), uniforms
    rng = np.random.Generator(np.random.PCG64(seed))
    p = rng.standard_exponential((rows, K + 1, vocab), dtype=np.float32)
    p /= p.sum(-1, keepdims=True)
    q = rng.standard_exponential((rows, K, vocab), dtype=np.float32)
    q /= q.sum(-1, keepdims=True)
    coins = rng.random((rows, K))
    drafts = np.empty((rows, K), np.int64)
    for i in range(rows):
        for j in range(K):
            cdf = np.cumsum(q[i, j], dtype=np.float64)
            drafts[i, j] = min(int(np.searchsorted(cdf, coins[i, j] * cdf[-1])), vocab - 1)
    lens = (np.arange(rows) % K + 1).astype(np.int64)
    uniforms = rng.random((rows, 2 * K + 1))
    return p, q, drafts, lens, uniforms


def time_calls(kernel, args, warmup: int, calls: int) -> list[float]:
    for _ in range(warmup):
        kernel.accept(*args)
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        kernel.accept(*args)
        out.append(time.perf_counter() - t0)
    return out


def time_kernel_only(launch, device: str, warmup: int, calls: int) -> float:
    """Mean seconds per launch of a staged kernel, back to back in steady state."""
    import torch

    for _ in range(warmup):
        launch()
    if device != "cuda":
        t0 = time.perf_counter()
        for _ in range(calls):
            launch()
        return (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def measure(kernel, args, a) -> float:
    if a.kernel_only:
        p, q, drafts, _, uniforms = args
        return time_kernel_only(kernel.staged(p, q, drafts, uniforms), a.device, a.warmup, a.calls)
    return statistics.median(time_calls(kernel, args, a.warmup, a.calls))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--draft-k", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", default="all", help="comma-separated names, or all")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--kernel-only",
        action="store_true",
        help="time each kernel on device tensors staged once (no adapter copies)",
    )
    a = ap.parse_args(argv)
    from specconform.adapters.kernel import BundledKernel
    from specconform.util.errors import UsageError

    args = inputs(a.rows, a.draft_k, a.vocab, a.seed)
    want = None if a.peers == "all" else set(a.peers.split(","))
    results = {
        "device": a.device,
        "rows": a.rows,
        "vocab": a.vocab,
        "draft_k": a.draft_k,
        "calls": a.calls,
        # s_per_call: the mean over back-to-back launches (kernel-only) or the median
        # of timed adapter calls (adapter)
        "mode": "kernel-only" if a.kernel_only else "adapter",
        "kernels": {},
    }
    base = measure(BundledKernel(a.device), args, a)
    results["kernels"]["bundled.speculative_accept"] = {"s_per_call": base, "ratio": 1.0}
    mode = "kernel only (staged device tensors, mean)" if a.kernel_only else "adapter (median)"
    print(
        f"device {a.device}, B={a.rows}, K={a.draft_k}, V={a.vocab}, {a.calls} calls each, {mode}"
    )
    print(f"{'kernel':<34} {'ms/call':>15} {'x bundled':>10}")
    print(f"{'bundled.speculative_accept':<34} {base * 1e3:>15.3f} {1.0:>10.2f}")
    for name, module, factory in PEERS:
        if want is not None and name not in want:
            continue
        try:
            kernel = getattr(importlib.import_module(module), factory)(device=a.device)
            t = measure(kernel, args, a)
        except Exception as exc:  # noqa: BLE001 -- one peer's failure (not installed, a
            # kernel its Triton cannot compile here) leaves the other peers' rows
            why = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
            if not isinstance(exc, UsageError):
                why = f"{type(exc).__name__}: {why}"
            print(f"{name:<34} {'-':>15} {'-':>10}  ({why})")
            results["kernels"][name] = {"skipped": why}
            continue
        results["kernels"][name] = {"s_per_call": t, "ratio": t / base, "name": kernel.name}
        print(f"{name:<34} {t * 1e3:>15.3f} {t / base:>10.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
