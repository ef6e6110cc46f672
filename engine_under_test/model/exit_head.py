"""Fitted exit heads: a useful early-exit draft for a model that was not trained for one.

SmolLM2-135M read through its own final norm + LM head after layer e < 30 is a useless
draft (TV(p, q) near 1 below layer ~22: the intermediate residual stream is not in the
last layer's basis). An exit head fixes the basis, not the depth: an affine map

    m_e(h) = W_e (h / rms(h)) + b_e          W_e [D, D], b_e [D], float32

fitted by ridge least squares so that m_e(h_e) approximates h_L / rms(h_L) (the last
layer's residual, scale-free: the final RMSNorm discards the scale anyway), then the
model's final norm + LM head. The draft law is q = softmax(lm_head(norm(m_e(h_e)))).
Verification still continues the unmodified state h_e through the remaining stages, so
"nothing recomputed" holds; the map changes only q.

The fit data is deterministic and needs no download: a corpus the model writes itself.
``CORPUS_SEQS`` sequences start from fixed English openings (``START_IDS``: SmolLM2
token ids of "Once upon a time", "The history of", ...; the tokenizer is not needed at
run time) and are continued by sampling (temperature 1, top-k 50) from one seeded CPU
generator; the states of every position after every stage
are the regression's rows. The fit runs in float64 on the CPU (ridge
``RIDGE`` x mean diagonal, so it is well posed with D + 1 unknowns per output).
``fit_exit_heads`` fills ``model.exit_maps`` for every stage but the last.
"""

from __future__ import annotations

import torch
from torch import nn

CORPUS_LEN = 48  # tokens per sequence, opening included
CORPUS_SEED = 0  # torch.Generator seed of the sampling
CORPUS_TOP_K = 50
RIDGE = 1e-2
# SmolLM2 ids of 32 English openings ("Once upon a time", "The history of", "In this
# article, we", ..., "The capital of Spain is"), tokenised once with its tokenizer.
START_IDS: tuple[tuple[int, ...], ...] = (
    (6403, 1980, 253, 655),
    (504, 1463, 282),
    (788, 451, 2524, 28, 392),
    (14026, 457, 983),
    (5965, 20334, 7302, 314),
    (504, 1450, 970, 288),
    (73, 15955, 339, 3514, 288),
    (12615, 314, 1135, 282),
    (504, 2240, 282),
    (49, 1123, 3743),
    (788, 260, 5738, 28, 339),
    (504, 1085, 2166, 327),
    (2020, 288, 919, 253),
    (12321, 835, 411),
    (504, 2388, 314),
    (26446, 416, 724),
    (2427, 339, 436, 1805),
    (504, 768, 1070, 2775),
    (5425, 3925, 314),
    (40833, 284, 7680),
    (504, 11594, 6100, 327),
    (788, 216, 33, 41, 41, 32, 28, 260),
    (12037, 868),
    (504, 3947, 1834),
    (2122, 359, 800, 1853, 288),
    (504, 808, 1833, 314),
    (22345, 2905, 314),
    (49, 2583, 314),
    (504, 5065),
    (1589, 436, 253, 3605, 3163),
    (30819, 1114, 2978),
    (504, 3575, 282, 7476, 314),
)
CORPUS_SEQS = len(START_IDS)  # sequences in the self-written corpus


class ExitMap(nn.Module):
    """h [..., D] -> W (h / rms(h)) + b [..., D], computed in float32."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):  # [D, D], [D]
        super().__init__()
        self.register_buffer("weight", weight.float())
        self.register_buffer("bias", bias.float())

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = h.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.nn.functional.linear(x, self.weight, self.bias).to(h.dtype)


@torch.no_grad()
def self_written_corpus(
    model, n: int = CORPUS_SEQS, length: int = CORPUS_LEN, seed: int = CORPUS_SEED
) -> torch.Tensor:
    """[n, length] int64 token ids: openings continued by the model's own samples.

    One token per step for all n rows; while a row is still inside its opening the
    step's sample is replaced by the opening's next token (so openings of any length
    share one loop). Deterministic: one seeded CPU generator, fixed order."""
    dev = model.embed_tokens.weight.device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    V = model.cfg.vocab_size  # the openings are SmolLM2 ids; another vocabulary gets
    starts = [tuple(t % V for t in START_IDS[i % len(START_IDS)]) for i in range(n)]  # ids mod V
    tokens = torch.tensor([s[0] for s in starts], dtype=torch.int64)[:, None]  # [n, 1]
    cache = model.new_cache(n, length)
    rows = torch.arange(n, device=dev)
    for t in range(length - 1):
        ctx = model.context(torch.full((n, 1), t, device=dev), rows, cache.max_len, True)
        h = model.run_loops(model.embed(tokens[:, -1:].to(dev)), 0, model.num_loops, cache, ctx)
        top = model.logits(h[:, 0]).cpu().topk(CORPUS_TOP_K, dim=-1)
        nxt = top.indices.gather(
            1, torch.multinomial(top.values.softmax(-1), 1, generator=gen)
        )  # [n, 1]
        forced = [s[t + 1] if t + 1 < len(s) else -1 for s in starts]
        nxt = torch.where(torch.tensor(forced)[:, None] >= 0, torch.tensor(forced)[:, None], nxt)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens.to(dev)


@torch.no_grad()
def stage_states(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """tokens [n, T] -> per stage, the residual states [n * T, D] float64 (CPU)."""
    n, T = tokens.shape
    dev = model.embed_tokens.weight.device
    cache = model.new_cache(n, T)
    ctx = model.context(
        torch.arange(T, device=dev)[None].expand(n, T),
        torch.arange(n, device=dev),
        cache.max_len,
        True,
    )
    h, out = model.embed(tokens.to(dev)), []
    for s in range(model.num_loops):
        h = model.run_loops(h, s, s + 1, cache, ctx)
        out.append(h.reshape(n * T, -1).double().cpu())
    return out


def _unit(x: torch.Tensor) -> torch.Tensor:  # [N, D] float64, rows scaled to rms 1
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def ridge_map(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least squares y ~ W unit(x) + b with a ridge: returns (W [D, D], b [D])."""
    xs = torch.cat([_unit(x), torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
    gram = xs.T @ xs
    lam = RIDGE * gram.diagonal().mean()
    gram = gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype)
    sol = torch.linalg.solve(gram, xs.T @ _unit(y))  # [D + 1, D]
    return sol[:-1].T.contiguous(), sol[-1].contiguous()


@torch.no_grad()
def fit_exit_heads(model, tokens: torch.Tensor | None = None) -> None:
    """Fit and install an ExitMap for every exit depth d = 1..S-1 of ``model``."""
    tokens = self_written_corpus(model) if tokens is None else tokens
    states = stage_states(model, tokens)
    target = states[-1]
    p = model.embed_tokens.weight
    for d in range(1, model.num_loops):
        w, b = ridge_map(states[d - 1], target)
        model.exit_maps[str(d)] = ExitMap(w, b).to(device=p.device)
