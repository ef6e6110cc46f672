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
from tests.engine.helpers import small_tie_case

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
    p[2, K] = float("nan")  # ... and a NaN that only a bonus at K would see
    return p, q, drafts, lens, u


def to_cuda(*tensors):
    return tuple(t.to(CUDA) for t in tensors)


def test_triton_kernels_are_in_use():
    assert triton_kernels_for(torch.zeros(1, device=CUDA)) is not None


def test_philox_cpu_and_cuda_bit_identical():
    g = torch.Generator().manual_seed(1)
    seeds = torch.cat(
        [torch.tensor([0, 1, 2**63 - 1, 2**32]), torch.randint(0, 2**62, (60,), generator=g)]
    )
    rounds = torch.cat(
        [torch.tensor([0, 2**32 + 5, 2**40, 1]), torch.randint(0, 10_000, (60,), generator=g)]
    )
    cpu = philox_uniforms(seeds, rounds, 33)
    assert torch.equal(philox_uniforms(*to_cuda(seeds, rounds), 33).cpu(), cpu)  # Triton
    assert torch.equal(philox_uniforms_torch(*to_cuda(seeds, rounds), 33).cpu(), cpu)
    for n in (1, 2, 255, 256, 257):
        assert torch.equal(
            philox_uniforms(*to_cuda(seeds, rounds), n).cpu(), philox_uniforms(seeds, rounds, n)
        )


def reference_rows(logits, t, k, p):
    """Sampler.probabilities row by row (on the logits' device)."""
    return torch.stack(
        [
            Sampler.probabilities(
                logits[i],
                SamplingParams(temperature=float(t[i]), top_k=int(k[i]), top_p=float(p[i])),
            )
            for i in range(logits.shape[0])
        ]
    )


def assert_close_law(got, want, atol=1e-6):
    """The fused kernel's contract: the same support, probabilities within 1e-6."""
    got, want = got.cpu(), want.cpu()
    bad = (got > 0) != (want > 0)
    assert not bad.any(), f"supports differ in rows {bad.any(-1).nonzero().flatten().tolist()}"
    diff = (got - want).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_batched_on_cuda_equals_the_reference(dtype):
    logits, t, k, p = prob_case(dtype=dtype)
    want_cpu = reference_rows(logits, t, k, p)
    logits, t, k, p = to_cuda(logits, t, k, p)
    want = reference_rows(logits, t, k, p)
    got = batched_probabilities(logits, t, k, p)  # the fused Triton kernel
    assert_close_law(got, want)
    assert_close_law(got, want_cpu)
    with triton(False):  # the torch path runs the reference's ops: bit for bit
        assert torch.equal(batched_probabilities(logits, t, k, p), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_path_equals_torch_path(dtype):
    logits, t, k, p = to_cuda(*prob_case(B=48, V=49_152, dtype=dtype, seed=3))
    fused = batched_probabilities(logits, t, k, p)
    with triton(False):
        plain = batched_probabilities(logits, t, k, p)
    assert_close_law(fused, plain)


@pytest.mark.parametrize("V", [3000, 49_152])
def test_batched_cuda_equals_cpu(V):
    logits, t, k, p = prob_case(B=24, V=V, seed=5)
    cpu = batched_probabilities(logits, t, k, p)
    for enabled in (True, False):
        with triton(enabled):
            gpu = batched_probabilities(*to_cuda(logits, t, k, p)).cpu()
        assert torch.equal(gpu > 0, cpu > 0)
        # CPU and CUDA softmax kernels sum and exponentiate differently: close, not equal.
        # Not atol=1e-6 alone: on a full-vocabulary row (V = 49,152, no top-k) the CPU
        # law itself is 1.26e-6 off the float64 law (float32 sums over 49,152 terms),
        # and an H200 run saw 1.22e-6 here; the fused kernel's algorithm is 1.1e-8 off.
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-6)


def test_fused_kernel_on_ties_cuts_and_fallbacks():
    # Many small cases against the CPU reference: integer logits make ties in logits
    # and in probabilities common (top-k ties, top-p cuts inside tie groups), and the
    # large-k rows (k > the kernel's group count) take the threshold-search fallback.
    g = torch.Generator().manual_seed(2024)
    logits, t, k, p = small_tie_case(g)
    assert_close_law(
        batched_probabilities(*to_cuda(logits, t, k, p)), reference_rows(logits, t, k, p)
    )
    # Few distinct values on a large vocabulary: huge tie groups at the k-th value and
    # at the top-p cut, k past the group count, top-k and top-p together.
    B, V = 32, 6000
    logits = torch.randint(0, 12, (B, V), generator=g).float() * 0.5
    k = torch.tensor([0, 1, 5, 20, 300, 1500, 2000, 5999] * 4)
    p = torch.tensor([1.0, 0.9, 0.3, 0.999, 0.05, 0.6, 0.75, 0.5] * 4)
    t = torch.tensor([1.0, 0.7, 1.3, 2.0] * 8)
    assert_close_law(
        batched_probabilities(*to_cuda(logits, t, k, p)), reference_rows(logits, t, k, p)
    )
    # Tiny vocabularies, exact quarter ties, subnormal tails.
    for logits, t, k, p in [
        (torch.tensor([[float("-inf"), 5.0, 5.0, 5.0, 5.0]]), [1.0], [0], [0.5]),
        (torch.tensor([[0.0, 0.0, -100.0]] * 2), [1.0, 1.0], [0, 0], [1.0, 0.9999999]),
        (torch.tensor([[2.0, 2.0], [1.0, 3.0]]), [1.0, 0.0], [1, 0], [0.5, 1.0]),
        (
            torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log().expand(3, 4),
            [1.0] * 3,
            [0, 2, 3],
            [0.5, 0.5, 1.0],
        ),
    ]:
        t, k, p = torch.tensor(t), torch.tensor(k), torch.tensor(p)
        assert_close_law(
            batched_probabilities(*to_cuda(logits, t, k, p)),
            reference_rows(logits, t, k, p),
            atol=1e-7,
        )


def test_fused_kernel_layouts_and_edge_inputs():
    g = torch.Generator().manual_seed(9)
    wide = torch.randn(6, 2 * 1001, generator=g) * 3
    logits = wide[:, ::2]  # not contiguous in the last dimension
    t = torch.tensor([1.0, 0.0, 0.8, 1.0, 1.0, 0.5])
    k = torch.tensor([10, 0, 0, 3, 0, 700])
    p = torch.tensor([1.0, 1.0, 0.9, 0.5, 1.0, 0.95])
    want = reference_rows(logits, t, k, p)
    cuda = to_cuda(logits, t, k, p)
    assert_close_law(batched_probabilities(*cuda), want)
    assert_close_law(batched_probabilities(cuda[0].double(), *cuda[1:]), want)
    assert batched_probabilities(cuda[0][:0], *(x[:0] for x in cuda[1:])).shape == (0, 1001)
    # Greedy is the first argmax, a NaN counting as the maximum (torch.argmax).
    greedy = torch.tensor([[1.0, 3.0, 3.0, float("nan"), 3.0], [1.0, 3.0, 3.0, 0.0, 3.0]])
    got = batched_probabilities(
        *to_cuda(greedy, torch.zeros(2), torch.zeros(2, dtype=torch.int64), torch.ones(2))
    )
    assert got.cpu().tolist() == [[0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]]


def kernel_paths_case():
    """Rows that steer the fused kernel's top-k candidate search down each of its paths.

    The kernel keeps column maxima (column c: elements c, c + BLOCK, ...) and gathers
    only the columns whose maximum reaches the group-maxima bound L:
      row 0, 1: random logits: a few dozen candidates, sorted in the buffer (row 1 also
        cuts top-p there);
      row 2: 100 columns of tied top logits: the columns fit the buffer, their 1,200
        candidates do not, so the exact threshold search finds the k-th value;
      row 3: graded columns: over CAP candidates >= L but only k above the exact k-th
        value, so after the search the kept set is compacted into the buffer for top-p;
      row 4: ties over half the row: more candidate columns than the buffer holds, so the
        row is streamed, searched, and top-p is cut by the streaming search.
    """
    from engine_under_test.sampling import triton_kernels

    block = triton_kernels.PROBS_CONFIG["BLOCK"]
    V = 12 * block
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(5, V, generator=g) * 2
    cols = torch.arange(100) * (block // 100)  # 100 columns in 100 different groups
    for j in range(V // block):
        logits[2, cols + j * block] = 9.0
        logits[3, cols + j * block] = 9.0 + 0.001 * torch.arange(100) - 0.0001 * j
    logits[4, : V // 2] = 9.0
    t = torch.tensor([1.0, 0.7, 1.0, 1.0, 1.3])
    k = torch.tensor([20, 50, 30, 30, 30])
    p = torch.tensor([1.0, 0.9, 1.0, 0.8, 0.8])
    return logits, t, k, p


def test_fused_kernel_candidate_paths():
    logits, t, k, p = kernel_paths_case()
    want = reference_rows(logits, t, k, p)
    assert (want[2] > 0).sum() == 1200  # every tie at the k-th value is kept
    assert_close_law(batched_probabilities(*to_cuda(logits, t, k, p)), want)


def test_hints_on_cuda():
    logits, t, k, p = prob_case(B=24, V=3000, seed=1)
    k = torch.where(k > 0, k, 7).clamp_max(60)  # top-k on in every row: the hint holds
    cuda = to_cuda(logits, t, k, p)
    hinted = batched_probabilities(*cuda, max_top_k=60)
    assert torch.equal(hinted, batched_probabilities(*cuda))  # the kernel ignores hints
    with triton(False):  # the torch path uses them, still the reference's law exactly
        assert torch.equal(batched_probabilities(*cuda, max_top_k=60), reference_rows(*cuda))


def test_batched_probabilities_under_cuda_graph_capture():
    logits, t, k, p = to_cuda(*prob_case(B=24, V=5000, seed=4))
    want = batched_probabilities(logits, t, k, p)  # also compiles the kernel
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        batched_probabilities(logits, t, k, p)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = batched_probabilities(logits, t, k, p)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, want)


def test_categorical_cuda_equals_cpu():
    g = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(512, 1000, generator=g) * 3, -1)
    probs[:, 700:] = 0  # zero tails
    u = torch.rand(512, dtype=torch.float64, generator=g)
    u[:4] = torch.tensor([0.0, 1.0 - 2.0**-53, 0.5, 0.25], dtype=torch.float64)
    for weights in (probs, probs.double()):
        assert torch.equal(categorical(*to_cuda(weights, u)).cpu(), categorical(weights, u))


@pytest.mark.parametrize("mutant", [None, "residual_from_p", "bonus_off_by_one", "shared_uniform"])
def test_speculative_accept_cuda_equals_cpu(mutant):
    args = accept_case()
    cpu = speculative_accept(*args, mutant=mutant)
    gpu = speculative_accept(*to_cuda(*args), mutant=mutant)
    for name, a, b in zip(cpu._fields, cpu, gpu, strict=True):
        assert torch.equal(_reason_blind(name, a), _reason_blind(name, b.cpu())), name
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


# --- the Triton accept and categorical kernels (triton_accept.py, triton_categorical.py) --
# The case builders are the CPU interpreter tests' (test_triton_interpret.py), here at the
# full vocabulary. Deterministic: every comparison is exact, no alpha or power applies.
@contextlib.contextmanager
def sampling_backend(backend):
    from engine_under_test.sampling._dispatch import set_sampling_backend

    set_sampling_backend(backend)
    try:
        yield
    finally:
        set_sampling_backend("auto")


def _reason_blind(name: str, value: torch.Tensor) -> torch.Tensor:
    """`invalid` compared as "some reason" vs "valid": the Triton kernel flags an invalid
    stop-point law as UNCLASSIFIED, the torch path names the reason; everything else
    must be equal bit for bit."""
    return value != 0 if name == "invalid" else value


def assert_accept_equal(args):
    """Triton (auto on CUDA) == torch on CUDA == torch on CPU, field by field."""
    cpu = speculative_accept(*args)
    cuda_args = to_cuda(*args)
    got = speculative_accept(*cuda_args)
    with sampling_backend("torch"):
        want = speculative_accept(*cuda_args)
    for name, a, b, c in zip(cpu._fields, cpu, want, got, strict=True):
        assert torch.equal(b.cpu(), a), f"{name}: torch CUDA differs from CPU"
        a, c = _reason_blind(name, a), _reason_blind(name, c.cpu())
        bad = (c != a).reshape(a.shape[0], -1).any(1).nonzero().flatten().tolist()
        assert not bad, f"{name}: Triton differs from torch in rows {bad[:20]}"
    return cpu


def test_sampling_kernels_are_in_use():
    from engine_under_test.sampling._dispatch import sampling_kernel_for

    x = torch.zeros(1, 1, 8, device=CUDA)
    assert sampling_kernel_for("speculative_accept", x, x) is not None
    assert sampling_kernel_for("categorical", x[0]) is not None
    assert sampling_kernel_for("speculative_accept", x.double(), x) is None  # torch path
    with sampling_backend("torch"):
        assert sampling_kernel_for("categorical", x[0]) is None


# Launch paths: split rows (switched on below 512 rows), one program per row at the
# small-batch and at the large-batch configuration.
PATHS = {
    "split": ({}, {"BELOW": 512}),
    "row": ({}, {"BELOW": 0}),
    "row1024": ({"BLOCK": 1024, "num_warps": 4}, {"BELOW": 0}),
}


@contextlib.contextmanager
def launch_path(name):
    from engine_under_test.sampling import triton_categorical as tc

    saved = dict(tc.SAMPLING_CONFIG), dict(tc.SPLIT_CONFIG)
    tc.SAMPLING_CONFIG.update(PATHS[name][0])
    tc.SPLIT_CONFIG.update(PATHS[name][1])
    try:
        yield
    finally:
        for config, old in zip((tc.SAMPLING_CONFIG, tc.SPLIT_CONFIG), saved, strict=True):
            config.clear()
            config.update(old)


@pytest.mark.parametrize("path", PATHS)
def test_accept_kernel_equals_torch_full_vocabulary(path):
    from tests.engine import test_triton_interpret as cases

    with launch_path(path):
        V = 49_152
        result = assert_accept_equal(cases.random_accept(B=384, K=3, V=V, seed=21))
        assert result.error[1] and not result.error[4]  # NaN at the stop row; inf q unread
        assert_accept_equal(cases.random_accept(B=256, K=3, V=V, seed=22, dtype=torch.bfloat16))
        result = assert_accept_equal(cases.boundary_accept(B=256, K=2, V=V))
        assert result.error[2] and result.error[3]  # all-zero bonus law, zero residual
        assert_accept_equal(cases.greedy_accept(B=256, K=3, V=V))
        assert_accept_equal(cases.tail_accept(B=96, K=1, V=V))
        for args in cases.accept_cases().values():  # the interpreter's sizes
            assert_accept_equal(args)


@pytest.mark.parametrize("path", PATHS)
def test_categorical_kernel_equals_torch_full_vocabulary(path):
    from tests.engine import test_triton_interpret as cases

    g = torch.Generator().manual_seed(23)
    named = {}
    for B in (1024, 200):  # the large-batch configuration, and below 512 rows
        probs = torch.softmax(torch.randn(B, 49_152, generator=g) * 3, -1)
        probs[::3, 30_000:] = 0.0
        u = torch.rand(B, dtype=torch.float64, generator=g)
        u[:3] = torch.tensor([0.0, 1 - 2.0**-53, 1.0], dtype=torch.float64)
        named[f"full{B}"] = (probs, u, torch.ones(B, dtype=torch.bool))
    named.update(cases.categorical_cases())
    with launch_path(path):
        check_categorical_cases(named)


def check_categorical_cases(named):
    for name, (weights, uu, valid) in named.items():
        for w in (weights, weights.double()):
            cpu = categorical(w, uu)
            got = categorical(*to_cuda(w, uu)).cpu()
            with sampling_backend("torch"):
                want = categorical(*to_cuda(w, uu)).cpu()
            assert torch.equal(want[valid], cpu[valid]), name
            bad = (valid & (got != cpu)).nonzero().flatten().tolist()
            assert not bad, f"{name}: Triton differs from torch in rows {bad[:20]}"
            assert ((got >= 0) & (got < w.shape[1])).all()


def test_accept_kernel_under_cuda_graph_capture():
    from tests.engine import test_triton_interpret as cases

    args = to_cuda(*cases.random_accept(B=64, K=3, V=4096, seed=24))
    want = speculative_accept(*args)  # compiles the kernel
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        speculative_accept(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = speculative_accept(*args)
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(want._fields, want, static, strict=True):
        assert torch.equal(a, b), name
