"""The sampling core on CUDA: equal to CPU, Triton equal to torch, no host syncs.

Every test here carries the `gpu` marker (module-level pytestmark); tests/conftest.py
skips them on machines without CUDA.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

from engine_under_test.params import SamplingParams
from engine_under_test.sampling import (
    RngRegistry,
    Sampler,
    batched_probabilities,
    categorical,
    philox_uniforms,
    set_triton_enabled,
    speculative_accept,
)
from engine_under_test.sampling._dispatch import triton_kernels_for
from engine_under_test.sampling.rng import philox_uniforms_torch

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


@contextlib.contextmanager
def triton(enabled):
    set_triton_enabled(enabled)
    try:
        yield
    finally:
        set_triton_enabled(True)


@contextlib.contextmanager
def no_syncs():
    """Any host-device synchronisation inside raises (torch's sync debug mode)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def prob_case(B=24, V=5000, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, V, generator=g) * 3).to(dtype)
    logits[::5, : V // 2] = logits[::5, :1]  # rows with massive ties
    t = torch.tensor([0.0, 1.0, 0.7, 1.5, 0.3, 2.0] * (B // 6), dtype=torch.float32)
    k = torch.tensor([0, 0, 5, 50, 1, 0, 3000, 2, -1, 20, V, 7] * (B // 12), dtype=torch.int64)
    p = torch.tensor([1.0, 0.9, 1.0, 0.5, 0.95, 0.2, 0.99, 1.0] * (B // 8), dtype=torch.float32)
    return logits, t, k, p


def accept_case(B=64, K=4, V=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 2, -1)
    q = torch.softmax(p.log()[:, :K] + torch.randn(B, K, V, generator=g) * 0.5, -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    drafts[0, 1] = V + 3  # an out-of-range draft
    lens = torch.randint(0, K + 1, (B,), generator=g)
    u = torch.rand(B, 2 * K + 1, dtype=torch.float64, generator=g)
    p[1, :, 0] = float("nan")  # an error row (its stop point sees the NaN) ...
    p[2, K] = float("nan")     # ... and a NaN that only a bonus at K would see
    return p, q, drafts, lens, u


def to_cuda(*tensors):
    return tuple(t.to(CUDA) for t in tensors)


def test_triton_kernels_are_in_use():
    assert triton_kernels_for(torch.zeros(1, device=CUDA)) is not None


def test_philox_cpu_and_cuda_bit_identical():
    g = torch.Generator().manual_seed(1)
    seeds = torch.cat([torch.tensor([0, 1, 2**63 - 1, 2**32]),
                       torch.randint(0, 2**62, (60,), generator=g)])
    rounds = torch.cat([torch.tensor([0, 2**32 + 5, 2**40, 1]),
                        torch.randint(0, 10_000, (60,), generator=g)])
    cpu = philox_uniforms(seeds, rounds, 33)
    assert torch.equal(philox_uniforms(*to_cuda(seeds, rounds), 33).cpu(), cpu)  # Triton
    assert torch.equal(philox_uniforms_torch(*to_cuda(seeds, rounds), 33).cpu(), cpu)
    for n in (1, 2, 255, 256, 257):
        assert torch.equal(philox_uniforms(*to_cuda(seeds, rounds), n).cpu(),
                           philox_uniforms(seeds, rounds, n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_batched_on_cuda_equals_the_reference_on_cuda(dtype):
    logits, t, k, p = to_cuda(*prob_case(dtype=dtype))
    got = batched_probabilities(logits, t, k, p)
    want = torch.stack([
        Sampler.probabilities(logits[i], SamplingParams(temperature=float(t[i]),
                                                        top_k=int(k[i]), top_p=float(p[i])))
        for i in range(logits.shape[0])])
    assert torch.equal(got > 0, want > 0)
    assert (got - want).abs().max().item() <= 1e-7
    assert torch.equal(got, want)  # same torch ops row by row: bit for bit on CUDA too


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_path_equals_torch_path(dtype):
    logits, t, k, p = to_cuda(*prob_case(B=48, V=49_152, dtype=dtype, seed=3))
    fused = batched_probabilities(logits, t, k, p)
    with triton(False):
        plain = batched_probabilities(logits, t, k, p)
    assert torch.equal(fused > 0, plain > 0)
    assert (fused - plain).abs().max().item() <= 1e-6
    assert torch.equal(fused, plain)  # the kernel only scales and masks: bit-identical


@pytest.mark.parametrize("V", [3000, 49_152])
def test_batched_cuda_equals_cpu(V):
    logits, t, k, p = prob_case(B=24, V=V, seed=5)
    cpu = batched_probabilities(logits, t, k, p)
    for enabled in (True, False):
        with triton(enabled):
            gpu = batched_probabilities(*to_cuda(logits, t, k, p)).cpu()
        assert torch.equal(gpu > 0, cpu > 0)
        # CPU and CUDA softmax kernels sum and exponentiate differently: close, not equal.
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-6)


def test_categorical_cuda_equals_cpu():
    g = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(512, 1000, generator=g) * 3, -1)
    probs[:, 700:] = 0  # zero tails
    u = torch.rand(512, dtype=torch.float64, generator=g)
    u[:4] = torch.tensor([0.0, 1.0 - 2.0**-53, 0.5, 0.25], dtype=torch.float64)
    for weights in (probs, probs.double()):
        assert torch.equal(categorical(*to_cuda(weights, u)).cpu(), categorical(weights, u))


@pytest.mark.parametrize("mutant", [None, "residual_from_p", "bonus_off_by_one",
                                    "shared_uniform"])
def test_speculative_accept_cuda_equals_cpu(mutant):
    args = accept_case()
    cpu = speculative_accept(*args, mutant=mutant)
    gpu = speculative_accept(*to_cuda(*args), mutant=mutant)
    for a, b in zip(cpu, gpu, strict=True):
        assert torch.equal(a, b.cpu())
    assert cpu.error[1] and not cpu.error[0]


def test_no_host_syncs_on_the_device_path():
    logits, t, k, p = to_cuda(*prob_case())
    accept_args = to_cuda(*accept_case())
    reg = RngRegistry(num_draws=9, max_slots=8, device=CUDA)
    reg.bind(1, 5)
    reg.bind(4, 6)
    slots = torch.tensor([4, 0, 1], device=CUDA)
    mask = torch.tensor([True, False, True], device=CUDA)

    def device_path():
        probs = batched_probabilities(logits, t, k, p)
        categorical(probs, torch.full((probs.shape[0],), 0.5, dtype=torch.float64, device=CUDA))
        speculative_accept(*accept_args)
        speculative_accept(*accept_args, mutant="shared_uniform")
        reg.draw(slots, mask)
        reg.draw(slots)
        reg.rewind(slots, mask)

    for enabled in (True, False):
        with triton(enabled):
            device_path()  # warm-up: lazy initialisation and Triton compilation may sync
            with no_syncs():
                device_path()
    torch.cuda.synchronize()


def test_registry_draw_under_cuda_graph_capture():
    eager = RngRegistry(num_draws=9, max_slots=4)  # CPU twin
    graphed = RngRegistry(num_draws=9, max_slots=4, device=CUDA)
    for reg in (eager, graphed):
        reg.bind(0, 11)
        reg.bind(3, 2**62 + 7)
    slots = torch.tensor([3, 2, 0])
    mask = torch.tensor([True, False, True])
    slots_d, mask_d = to_cuda(slots, mask)

    # Warm up on a side stream (compiles the kernels), then undo its advance.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graphed.draw(slots_d, mask_d)
        graphed.rewind(slots_d, mask_d)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = graphed.draw(slots_d, mask_d)
    graphed.rewind(slots_d, mask_d)  # capture does not run the draw, but be explicit:
    graphed.round.copy_(eager.round.to(CUDA))  # both registries start at the same rounds
    for _ in range(3):
        graph.replay()
        want = eager.draw(slots, mask)
        assert torch.equal(static_out.cpu(), want)
    assert torch.equal(graphed.round.cpu(), eager.round)
