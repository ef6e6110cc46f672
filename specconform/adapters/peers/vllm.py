"""vLLM's rejection sampler as a specconform kernel adapter (tested: vllm 0.33.0).

Two factories (``sampler.adapter: specconform.adapters.peers.vllm:<factory>``):

- ``forward`` (black-box, Monte Carlo only): vLLM's real
  ``vllm.v1.sample.rejection_sampler.RejectionSampler.forward`` with its own ``Sampler``
  for the bonus token, its ``SpecDecodeMetadata`` (ragged draft lengths flattened with
  ``cu_num_draft_tokens``, target and bonus rows of one logits tensor) and its
  ``SamplingMetadata``: per-request temperature, top-k and top-p, greedy and random rows
  in one batch, half the random rows with their own ``torch.Generator`` (seeded
  requests), half on torch's global generator (unseeded requests). vLLM draws its coins
  (``generate_uniform_probs``: float64) and its recovered-token noise (exponentials) itself.
- ``accept_kernel`` (white-box: quadrature and Monte Carlo): vLLM's Triton kernel
  ``rejection_random_sample_kernel`` (through ``_rejection_random_sample``, as
  ``rejection_sample`` calls it) with the protocol's coins passed as its
  ``uniform_probs``. That kernel takes its recovered and bonus tokens as inputs (vLLM
  samples them elsewhere, the recovered ones by exponential races that no single uniform
  drives), so this adapter draws them by inverse CDF of max(p - q, 0) and of p at the
  protocol's correction and bonus uniforms: quadrature then tests vLLM's accept and
  commit logic exactly (including its edge at coin 0), not its recovered-token sampler,
  which the black-box ``forward`` protocol covers.

How the protocol's laws reach vLLM (``forward``): the sampler takes logits, not p, so
row r of a request with temperature T gets logits ``T * log p'`` where p' is p plus
*decoys* on p's zero-mass tokens that the request's own top-k or top-p must remove:
top-k rows put decoys 30 nats below p's smallest mass and set k = |support of p|; top-p
rows give the decoys a total mass eps = min(p on its support) / 10 (p' = (1 - eps) p on
the support) and set top_p = 1 - 2 eps, so that the smallest prefix reaching top_p is
exactly p's support; plain rows give zero-mass tokens -inf. After vLLM's temperature,
top-k/top-p and softmax the law is p again (float32 rounding aside): a decoy in the
output means vLLM's top-k/top-p was not applied where it should be. Greedy rows
(temperature 0) ride along (one per 8 random rows, copies of random rows' inputs); the
adapter checks them against argmax chains itself and, if one is wrong, flags every
random row of that call as an error (the protocol's kernel_errors test fails).

Planted misuse (``mutant``, the negative controls of tests/peers): ``wrong_temperature``
builds every random row's logits for temperature 1 (log p) while its metadata says 0.7:
vLLM then samples softmax(log p / 0.7), not p.
"""

from __future__ import annotations

import numpy as np

from specconform.adapters.kernel import KernelOutput
from specconform.adapters.peers import (
    check_device,
    import_module,
    interpret_on_cpu,
    inverse_cdf,
    require,
    row_seeds,
)
from specconform.util.errors import UsageError

DIST = "vllm"
TESTED_VERSION = "0.33.0"
INSTALL = f"vllm=={TESTED_VERSION} --no-deps (plus its sampler's import closure: make peers-test)"
MODULE = "vllm.v1.sample.rejection_sampler"
MUTANTS = ("wrong_temperature",)

TEMPERATURES = (1.0, 0.7, 1.5)  # per random row, cycled
FILTERS = ("none", "top_k", "top_p")  # per random row, cycled (coprime with the above)
GREEDY_EVERY = 8  # one greedy row rides along per this many random rows
DECOY_NATS = 30.0
WRONG_TEMPERATURE = 0.7  # the planted misuse: metadata temperature for logits built at 1


def _load(device: str, mutant: str | None):
    if mutant is not None and mutant not in MUTANTS:
        raise UsageError(f"--mutant {mutant}: the vllm adapter plants only {', '.join(MUTANTS)}")
    version = require(DIST, TESTED_VERSION, INSTALL)
    # Not VLLM_TARGET_DEVICE=cpu: vLLM's CPU platform needs its CPU build's compiled ops
    # (torch.ops._C.greedy_argmax), which the CUDA wheel's vllm._C does not provide here.
    interpret_on_cpu(device, ("vllm", "triton"))
    check_device(device)
    return version, import_module(MODULE, DIST, INSTALL)


def forward(device: str = "cpu", mutant: str | None = None):
    version, rs = _load(device, mutant)
    return VllmForward(rs, device, mutant, version)


def accept_kernel(device: str = "cpu", mutant: str | None = None):
    if mutant is not None:
        raise UsageError("--mutant: the vllm accept_kernel adapter plants none (use forward)")
    version, rs = _load(device, mutant)
    return VllmAcceptKernel(rs, device, version)


def _sampling_metadata(torch, temperature, top_k, top_p, generators, all_greedy, all_random):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    empty = torch.tensor([])
    return SamplingMetadata(
        temperature=temperature,
        all_greedy=all_greedy,
        all_random=all_random,
        top_p=top_p,
        top_k=top_k,
        generators=generators,
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=empty,
        presence_penalties=empty,
        repetition_penalties=empty,
        output_token_ids=[],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
        spec_token_ids=[],
    )


def _spec_metadata(torch, draft_rows: list[list[int]], dev):
    """vLLM's SpecDecodeMetadata for requests with these drafts, logits laid out as the
    model runner does: each request's draft-position rows, then its bonus row."""
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    md = SpecDecodeMetadata.make_dummy(draft_rows, device=dev)
    target: list[int] = []
    bonus: list[int] = []
    at = 0
    for ids in draft_rows:
        target.extend(range(at, at + len(ids)))
        at += len(ids)
        bonus.append(at)
        at += 1
    md.target_logits_indices = torch.tensor(target, dtype=torch.int32, device=dev)
    md.bonus_logits_indices = torch.tensor(bonus, dtype=torch.int32, device=dev)
    md.logits_indices = torch.arange(at, dtype=torch.int32, device=dev)
    return md


def _decoyed_logits(law: np.ndarray, T: float, mode: str, eps: float) -> np.ndarray:
    """Logits [V] float32 whose softmax(logits / T), after this row's top-k (k = support)
    or top-p (1 - 2 eps), is `law` (see the module docstring)."""
    support = law > 0
    n_zero = int((~support).sum())
    logp = np.full(law.shape, -np.inf)
    mass = law[support].astype(np.float64)
    if mode == "top_k" and n_zero:
        logp[support] = np.log(mass)
        logp[~support] = logp[support].min() - DECOY_NATS
    elif mode == "top_p" and n_zero:
        logp[support] = np.log((1.0 - eps) * mass)
        logp[~support] = np.log(eps / n_zero)
    else:
        logp[support] = np.log(mass)
    return (T * logp).astype(np.float32)


class VllmForward:
    """Black-box: RejectionSampler.forward, randomness drawn by vLLM."""

    def __init__(self, rs_module, device: str, mutant: str | None, version: str):
        import torch
        from vllm.v1.sample.sampler import Sampler

        self._torch = torch
        self._dev = torch.device(device)
        self._sampler = rs_module.RejectionSampler(Sampler(), device=self._dev)
        self._calls = 0
        self._base: int | None = None
        # vLLM's top-k/top-p Triton kernel (_topk_topp_kernel) does not run in Triton
        # 3.6's interpreter (it calls .to() on tl.program_id, a Python int there): on
        # CPU no row uses top-k or top-p (top_k = top_p = None); on CUDA they cycle.
        self._filters = FILTERS if device == "cuda" else ("none",)
        self.mutant = mutant
        self.name = f"vllm {version} RejectionSampler.forward" + (f"[{mutant}]" if mutant else "")

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        # p: [B, K+1, V] float32; q: [B, K, V] float32; drafts: [B, K] int64;
        # draft_lens: [B] int64; uniforms: [B, 2K+1] float64 (ignored: black-box)
        B, K1, _ = p.shape
        K = K1 - 1
        lens = np.asarray(draft_lens, np.int64)
        call, rows = self._forward_call(p, q, drafts, lens, uniforms)
        out = call()
        sampled = out.sampled_token_ids.cpu().numpy().astype(np.int64)  # [n_req, max_L+1]
        width = sampled.shape[1]
        tokens = np.full((B, K + 1), -1, np.int64)
        tokens[:, : min(width, K + 1)] = sampled[:B, : K + 1]
        count = (tokens >= 0).sum(axis=1)
        num_accepted = np.maximum(count - 1, 0)
        error = np.zeros(B, bool)
        ok = True
        for r in range(B, len(rows)):
            src = rows[r]
            if not np.array_equal(
                sampled[r], _greedy_expected(p[src], drafts[src], lens[src], width)
            ):
                ok = False
        if not ok:
            error[:] = True
        return KernelOutput(tokens, num_accepted, error)

    def staged(self, p, q, drafts, uniforms):
        """Kernel-only timing: RejectionSampler.forward's inputs (logits, draft probs,
        metadata) on the device once, every row at draft length K; a zero-argument call
        of forward (its result stays on the device)."""
        lens = np.full(p.shape[0], p.shape[1] - 1, np.int64)
        return self._forward_call(p, q, drafts, lens, uniforms)[0]

    def _forward_call(self, p, q, drafts, lens, uniforms):
        """forward's inputs for one accept() (the greedy check rows appended; ``rows``:
        request -> source row) and a zero-argument call of forward on them."""
        torch = self._torch
        B, K1, V = p.shape
        if self._base is None:
            self._base = row_seeds(uniforms, 0x7654)
        self._calls += 1
        torch.manual_seed((self._base + self._calls) % (1 << 63))  # unseeded requests
        n_greedy = (B + GREEDY_EVERY - 1) // GREEDY_EVERY
        greedy_src = np.arange(n_greedy) * GREEDY_EVERY % max(B, 1)
        rows = list(range(B)) + [int(i) for i in greedy_src]  # request -> source row
        temps, ks, tps, logits, draft_rows, dprobs = [], [], [], [], [], []
        support = (p > 0).sum(axis=2)  # [B, K+1]
        for r, src in enumerate(rows):
            greedy = r >= B
            L = int(lens[src])
            T = 0.0 if greedy else TEMPERATURES[r % len(TEMPERATURES)]
            mode = "none" if greedy else self._filters[r % len(self._filters)]
            scale = 1.0 if greedy else T
            if self.mutant == "wrong_temperature" and not greedy:
                scale, T = 1.0, WRONG_TEMPERATURE
            laws = p[src, : L + 1]
            # One top-p per request: the smallest eps over its positions keeps every
            # position's support exactly (the rule holds for any smaller eps).
            eps = min(float(law[law > 0].min()) for law in laws) / 10.0
            for law in laws:
                logits.append(_decoyed_logits(law, scale, mode, eps))
            has_zero = bool((laws <= 0).any())
            temps.append(T)
            ks.append(int(support[src, : L + 1].max()) if mode == "top_k" else V)
            tps.append(1.0 - 2.0 * eps if (mode == "top_p" and has_zero) else 1.0)
            draft_rows.append([int(x) for x in drafts[src, :L]])
            if L:
                dprobs.append(q[src, :L])
        dev = self._dev
        generators = {
            r: torch.Generator(device=dev).manual_seed(
                (self._base * 1000003 + self._calls * 65537 + r) % (1 << 63)
            )
            for r in range(B)
            if r % 2 == 0
        }
        use_k, use_p = "top_k" in self._filters, "top_p" in self._filters
        sm = _sampling_metadata(
            torch,
            temperature=torch.tensor(temps, dtype=torch.float32, device=dev),
            top_k=torch.tensor(ks, dtype=torch.int32, device=dev) if use_k else None,
            top_p=torch.tensor(tps, dtype=torch.float32, device=dev) if use_p else None,
            generators=generators,
            all_greedy=False,
            all_random=False,
        )
        md = _spec_metadata(torch, draft_rows, dev)
        draft_probs = (
            torch.as_tensor(np.concatenate(dprobs), device=dev).contiguous()
            if dprobs
            else torch.zeros((0, V), dtype=torch.float32, device=dev)
        )
        logits_t = torch.as_tensor(np.stack(logits), device=dev)

        def call():
            return self._sampler(md, draft_probs=draft_probs, logits=logits_t, sampling_metadata=sm)

        return call, rows


def _greedy_expected(p_rows, drafts, L, width) -> np.ndarray:
    """What a greedy request must commit: drafts while they equal the target argmax, then
    the argmax (correction) or, all accepted, the bonus argmax."""
    out = np.full(width, -1, np.int64)
    for j in range(int(L)):
        best = int(np.argmax(p_rows[j]))
        out[j] = best
        if int(drafts[j]) != best:
            return out
    out[int(L)] = int(np.argmax(p_rows[int(L)]))
    return out


class VllmAcceptKernel:
    """White-box: vLLM's rejection_random_sample_kernel on the protocol's coins."""

    def __init__(self, rs_module, device: str, version: str):
        import torch

        self._torch = torch
        self._rs = rs_module
        self._dev = torch.device(device)
        self.name = f"vllm {version} rejection_random_sample_kernel"

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        # p: [B, K+1, V] float32; q: [B, K, V] float32; drafts: [B, K] int64;
        # draft_lens: [B] int64; uniforms: [B, 2K+1] float64
        B, K1, _ = p.shape
        sampled = self._kernel_call(p, q, drafts, np.asarray(draft_lens, np.int64), uniforms)()
        sampled = sampled.cpu().numpy().astype(np.int64)
        tokens = np.full((B, K1), -1, np.int64)
        w = min(sampled.shape[1], K1)
        tokens[:, :w] = sampled[:, :w]
        num_accepted = np.maximum((tokens >= 0).sum(axis=1) - 1, 0)
        return KernelOutput(tokens, num_accepted, np.zeros(B, bool))

    def staged(self, p, q, drafts, uniforms):
        """Kernel-only timing: the kernel's inputs on the device once, every row at draft
        length K; a zero-argument call that allocates the output and launches
        rejection_random_sample_kernel. The recovered and bonus tokens are the adapter's
        (inverse CDF on the host, white-box), so vLLM's recovered-token sampling kernel is
        not in this figure (``forward``'s is the whole step)."""
        lens = np.full(p.shape[0], p.shape[1] - 1, np.int64)
        return self._kernel_call(p, q, drafts, lens, uniforms)

    def _kernel_call(self, p, q, drafts, lens, uniforms):
        """A zero-argument call of the kernel on these inputs (copied to the device
        now); it returns the [B, max_len + 1] int32 output on the device."""
        torch, dev = self._torch, self._dev
        B, K1, V = p.shape
        K = K1 - 1
        u = np.asarray(uniforms, np.float64)
        mask = np.arange(K)[None, :] < lens[:, None]  # [B, K] live draft positions
        b_idx, j_idx = np.nonzero(mask)  # flattened request-major, as vLLM lays them out
        residual = np.maximum(p[b_idx, j_idx].astype(np.float64) - q[b_idx, j_idx], 0.0)
        if residual.size:
            recovered = inverse_cdf(
                np.where(residual.sum(1, keepdims=True) > 0, residual, p[b_idx, j_idx]),
                u[b_idx, K + j_idx],
            )
        else:
            recovered = np.zeros(0, np.int64)
        bonus = inverse_cdf(p[np.arange(B), lens], u[:, 2 * K])
        max_len = max(int(lens.max(initial=0)), 1)
        t = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=dev)  # noqa: E731
        args = (
            t(np.cumsum(lens), torch.int32),
            t(drafts[b_idx, j_idx], torch.int32),
            t(q[b_idx, j_idx].reshape(-1, V), torch.float32),
            t(p[b_idx, j_idx].reshape(-1, V), torch.float32),
            t(bonus[:, None], torch.int64),
            t(recovered, torch.int32),
            t(u[b_idx, j_idx], torch.float64),
            torch.zeros(B, dtype=torch.bool, device=dev),
        )

        def call():
            out = torch.full((B, max_len + 1), -1, dtype=torch.int32, device=dev)
            self._rs._rejection_random_sample(out, *args, max_len, None)
            return out

        return call
