"""Can a refill's prefill share the round's kernels and keep every token? (issue 38)

Packing a newcomer's prompt into the round's verify forward (its tokens as extra rows
of the shallow pass and of the deep pass, keys written before attention as in every
forward) would save the prefill's own launches: the "+6%" of the pass-bound analysis
in docs/gpu-runs.md. It runs the same arithmetic on the same inputs in other shapes,
so it keeps the law; this script checks whether it also keeps the bits, which the
engine's fixed-seed tests and behaviour goldens compare.

For each preset and prompt length it prefills one prompt twice into fresh caches:
as today (``run_loops`` over the [1, T] prompt, all loops), and packed beside 4 decode
rows (loops 0..d-1 with every token a row of one position, loops d..R-1 in rows of
W + 1 = 4 positions next to 4 verify rows). It prints whether the last position's
logits and the prompt's keys are bit-identical, and the largest difference. A second
table checks the two kernels involved in isolation: ``F.linear`` over M rows against
the same rows inside a larger batch, and ``scaled_dot_product_attention`` over T
queries at once against one query per row.

    python bench/refill_packing_bits.py          # CPU, fp32, seconds
    python bench/refill_packing_bits.py --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from engine_under_test import ModelConfig
from engine_under_test.model import build_model


def packed_vs_separate(model, T: int, device, C: int = 4, rows: int = 4, seed: int = 0):
    """(logits equal, keys equal, max |logit difference|) for one prompt of T tokens."""
    g = torch.Generator().manual_seed(seed)
    V, R = model.cfg.vocab_size, model.num_loops
    d = max(1, R // 2)
    prompt = torch.randint(0, V, (T,), generator=g).to(device)
    slot, L = rows + 1, 128
    one, two = model.new_cache(rows + 2, L), model.new_cache(rows + 2, L)
    ctx = model.context(
        torch.arange(T, device=device)[None], torch.tensor([slot], device=device), L, prefix=False
    )
    separate = model.logits(model.run_loops(model.embed(prompt[None]), 0, R, one, ctx)[0, -1])

    n = -(-T // C)  # chunks of C positions; pads past T are never attended by the prompt
    padded = torch.cat([prompt, prompt.new_zeros(n * C - T)])
    dec = torch.randint(0, V, (rows,), generator=g).to(device)
    tok_rows = torch.cat([torch.arange(rows), torch.full((n * C,), slot)]).to(device)
    tok_pos = torch.cat([torch.full((rows,), 60), torch.arange(n * C)]).to(device)
    ctx = model.context(tok_pos[:, None], tok_rows, L, prefix=False)
    h = model.run_loops(model.embed(torch.cat([dec, padded])[:, None]), 0, d, two, ctx)
    verify = torch.randn(rows, C, h.shape[-1], generator=g).to(device, h.dtype)
    deep = torch.cat([verify, h[rows:].reshape(n, C, -1)])
    chunk_rows = torch.cat([torch.arange(rows), torch.full((n,), slot)]).to(device)
    chunk_pos = torch.cat(
        [60 + torch.arange(C).expand(rows, C), torch.arange(n * C).view(n, C)]
    ).to(device)
    ctx = model.context(chunk_pos, chunk_rows, L, prefix=False)
    out = model.run_loops(deep, d, R, two, ctx)
    packed = model.logits(out[rows:].reshape(n * C, -1)[T - 1])
    keys = all(torch.equal(one.k[r, :, slot, :, :T], two.k[r, :, slot, :, :T]) for r in range(R))
    return torch.equal(separate, packed), keys, (separate - packed).abs().max().item()


def kernels(device, dtype) -> list[str]:
    torch.manual_seed(0)
    lines = []
    for D, N in ((64, 512), (256, 704), (512, 1408)):
        w = torch.randn(N, D, device=device, dtype=dtype)
        x = torch.randn(300, D, device=device, dtype=dtype)
        full = F.linear(x, w)
        differ = [M for M in range(1, 65) if not torch.equal(F.linear(x[:M], w), full[:M])]
        lines.append(
            f"linear {D}->{N}: rows differing from a 300-row batch at M = {differ or 'none'}"
        )
    G, hd, L, T = 2, 32, 128, 10
    k, v = (torch.randn(1, G, L, hd, device=device, dtype=dtype) for _ in range(2))
    q = torch.randn(1, G, T, hd, device=device, dtype=dtype)
    mask = torch.arange(L, device=device)[None] <= torch.arange(T, device=device)[:, None]
    together = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])
    alone = F.scaled_dot_product_attention(
        q.permute(2, 1, 0, 3),
        k.expand(T, G, L, hd),
        v.expand(T, G, L, hd),
        attn_mask=mask[:, None, None, :],
    ).permute(2, 1, 0, 3)
    diff = (together - alone).abs().max().item()
    lines.append(
        f"sdpa: {T} queries together vs one per row: equal {torch.equal(together, alone)} "
        f"(max diff {diff:.2e})"
    )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--presets", default="tiny,small")
    a = ap.parse_args(argv)
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    print(f"# torch {torch.__version__}, {device}, {dtype}, threads {torch.get_num_threads()}")
    for preset in a.presets.split(","):
        model = build_model(ModelConfig.preset(preset, seed=0), device, dtype)
        for T in (5, 10, 23):
            logits, keys, diff = packed_vs_separate(model, T, device)
            print(
                f"{preset:>6} T={T:>2}: logits bit-identical {logits}, prompt keys "
                f"bit-identical {keys}, max |logit diff| {diff:.2e}"
            )
    for line in kernels(device, dtype):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
