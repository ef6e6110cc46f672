"""The Triton accept and categorical kernels equal the torch path, run on CPU under
Triton's interpreter (TRITON_INTERPRET=1).

The interpreter must be switched on before triton is first imported, so the
comparisons run in one child process (this file run as a script, ~10 s); each test
reads one case's verdict from it. Skipped when triton is not installed (it ships with
CUDA builds of torch; on CPU: `pip install 'triton==3.6.*' 'numpy<2.3'`). The same case
builders run at full size on CUDA in test_sampling_gpu.py.

Deterministic (fixed seeds, exact comparisons): no alpha or power applies. The
negative controls check that the cases can fail: torch's own mutants and a left-closed
cdf search (ties at a boundary broken the other way) must differ from the kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
HAS_TRITON = importlib.util.find_spec("triton") is not None
EXACT = 2.0**-53  # 1 - EXACT is the largest float64 below 1


# --- case builders (shared with test_sampling_gpu.py) -------------------------------------
def random_accept(B=16, K=3, V=300, seed=0, dtype=torch.float32):
    """Random laws, draft_lens 0..K, an out-of-range draft, NaN rows and NaNs never read."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 2, -1)
    q = torch.softmax(p.log()[:, :K] + torch.randn(B, K, V, generator=g) * 0.5, -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    drafts[0, K - 1] = V + 3  # out of range: a rejection
    drafts[3, 0] = -2
    lens = torch.arange(B) % (K + 1)  # every draft_len 0..K
    u = torch.rand(B, 2 * K + 1, dtype=torch.float64, generator=g)
    p[1, :, 0] = float("nan")  # an error row, whatever its stop point
    p[2, K] = float("nan")  # seen only by a bonus at K
    q[5, :, 7] = float("nan")  # row 5: lens 1; seen only if it rejects there
    q[4] = float("inf")  # row 4: lens 0 (bonus from p[0]): q never read
    return p.to(dtype), q.to(dtype), drafts, lens, u


def boundary_accept(B=16, K=2, V=200, seed=1):
    """Dyadic laws (exact float64 sums in any order) and uniforms exactly at boundaries.

    Even rows accept every draft (coins 0, drafts of positive p) and draw the bonus at
    draft_len; odd rows reject at 0 (a draft with p = 0) and draw from the residual
    {10: 1/4, 150: 1/4} of p = {10: 1/2, 100: 1/4, 150: 1/4}, q = {10: 1/4, 100: 1/2,
    199: 1/4}. Row 2 has an all-zero bonus law (error); row 3 has q = p (zero residual:
    error)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.zeros(B, K + 1, V)
    q = torch.zeros(B, K, V)
    p[:, :, [3, 70, 71, 150]] = torch.tensor([0.125, 0.375, 0.25, 0.25])
    q[:, :, [3, 70]] = 0.5
    odd = torch.arange(B) % 2 == 1
    p[odd] = 0.0
    p[odd, :, 10], p[odd, :, 100], p[odd, :, 150] = 0.5, 0.25, 0.25
    q[odd] = 0.0
    q[odd, :, 10], q[odd, :, 100], q[odd, :, 199] = 0.25, 0.5, 0.25
    drafts = torch.where(odd[:, None], 5, 3).expand(B, K).clone()
    lens = torch.randint(0, K + 1, (B,), generator=g)
    lens[odd] = K
    u = torch.zeros(B, 2 * K + 1, dtype=torch.float64)
    grid = torch.tensor(
        [0.0, 0.125, 0.5, 0.75, 1 - EXACT, 0.3, 0.5 - EXACT, 0.875], dtype=torch.float64
    )
    draws = grid[torch.randint(0, len(grid), (B,), generator=g)]
    u[:, 2 * K] = draws  # bonus draws (even rows)
    u[:, K] = draws  # correction at 0 (odd rows)
    p[2, lens[2]] = 0.0
    q[3] = p[3, :K]
    return p, q, drafts, lens, u


def greedy_accept(B=12, K=3, V=150, seed=2):
    """One-hot p and q, zero uniforms: greedy acceptance."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, V, (B, K + 1), generator=g)
    drafted = torch.where(
        torch.rand(B, K, generator=g) < 0.7, target[:, :K], torch.randint(0, V, (B, K), generator=g)
    )
    p = torch.nn.functional.one_hot(target, V).float()
    q = torch.nn.functional.one_hot(drafted, V).float()
    lens = torch.randint(0, K + 1, (B,), generator=g)
    return p, q, drafted, lens, torch.zeros(B, 2 * K + 1, dtype=torch.float64)


def tail_accept(B=9, K=1, V=260, seed=3):
    """Support confined to one tile in the middle (zero tails both sides), zero gaps,
    u at 0 and just below 1 (the last-positive fallback), inf and NaN at stop rows."""
    g = torch.Generator().manual_seed(seed)
    p = torch.zeros(B, K + 1, V)
    q = torch.zeros(B, K, V)
    support = torch.arange(130, 190, 3)
    p[:, :, support] = torch.rand(B, K + 1, len(support), generator=g)
    q[:, :, support[::2]] = torch.rand(B, K, len(support[::2]), generator=g)
    drafts = support[torch.randint(0, len(support), (B, K), generator=g)]
    lens = torch.full((B,), K)
    u = torch.rand(B, 2 * K + 1, dtype=torch.float64, generator=g)
    u[::3, K:] = 0.0
    u[1::3, K:] = 1 - EXACT
    u[5, :K] = 0.0  # accept; bonus law has an inf: error
    p[5, K, 140] = float("inf")
    u[6, :K] = 0.999  # row 6 rejects where q > p ... with a NaN in q: error
    q[6, 0, 250] = float("nan")
    p[6, 0, drafts[6, 0]] = 0.0
    return p, q, drafts, lens, u


def accept_cases() -> dict[str, tuple]:
    g = torch.Generator().manual_seed(7)
    wide = torch.rand(8, 3, 2 * 90, generator=g)
    strided = (
        wide[:, :, ::2],
        wide[:, :2, 1::2],
        torch.randint(0, 90, (8, 2), generator=g),
        torch.tensor([0, 1, 2, 2, 1, 0, 2, 2]),
        torch.rand(8, 5, dtype=torch.float64, generator=g),
    )
    zero_k = (
        torch.softmax(torch.randn(6, 1, 100, generator=g), -1),
        torch.zeros(6, 0, 100),
        torch.zeros(6, 0, dtype=torch.int64),
        torch.zeros(6, dtype=torch.int64),
        torch.tensor([[0.0], [0.5], [1 - EXACT], [0.01], [0.99], [0.3]], dtype=torch.float64),
    )
    return {
        "random": random_accept(),
        "random_bf16": random_accept(B=8, seed=4, dtype=torch.bfloat16),
        "random_fp16_k1": random_accept(B=8, K=1, seed=5, dtype=torch.float16),
        "boundary": boundary_accept(),
        "greedy": greedy_accept(),
        "tails": tail_accept(),
        "strided": strided,
        "k0": zero_k,
    }


def categorical_cases() -> dict[str, tuple]:
    """(probs [B, V], u [B] float64, valid [B] bool): rows with positive finite mass."""
    g = torch.Generator().manual_seed(11)
    probs = torch.softmax(torch.randn(12, 300, generator=g) * 3, -1)
    probs[::2, 200:] = 0.0  # zero tails
    u = torch.rand(12, dtype=torch.float64, generator=g)
    u[:4] = torch.tensor([0.0, 1 - EXACT, 0.5, 1.0], dtype=torch.float64)
    uniform = torch.zeros(16, 256)
    uniform[:, 64:128] = 1.0 / 64  # total exactly 1: u = k/64 is exactly a cdf boundary
    uniform[1::2, 100] = 0.0  # a zero weight inside the support ...
    uniform[1::2, 130] = 1.0 / 64  # ... and one past a zero gap
    u_grid = torch.arange(16, dtype=torch.float64) * 4 / 64
    # Support 32..95 at 1/64: u = 0.5 puts the target exactly on the cdf at column 63, a
    # tile boundary at BLOCK 64 inside a chunk of two tiles (split64x2).
    straddle = torch.zeros(8, 512)
    straddle[:, 32:96] = 1.0 / 64
    u_straddle = torch.tensor(
        [0.5, 0.25, 0.75, 0.5 - EXACT, 0.5, 0.0, 1 - EXACT, 0.125], dtype=torch.float64
    )
    special = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [0.0, float("nan"), 1.0],
            [0.5, -1.0, 0.5],
            [0.0, 0.0, 2.0**-149],
            [float("inf"), 1.0, 0.0],
        ]
    )
    u_special = torch.tensor([0.5, 0.5, 0.75, 1 - EXACT, 0.2], dtype=torch.float64)
    valid_special = torch.tensor([False, False, True, True, False])
    return {
        "random": (probs, u, torch.ones(12, dtype=torch.bool)),
        "random_f64": (probs.double(), u, torch.ones(12, dtype=torch.bool)),
        "boundary": (uniform, u_grid, torch.ones(16, dtype=torch.bool)),
        "tile_boundary": (straddle, u_straddle, torch.ones(8, dtype=torch.bool)),
        "special": (special, u_special, valid_special),
        "one_token": (
            torch.ones(3, 1),
            torch.tensor([0.0, 0.5, 1 - EXACT], dtype=torch.float64),
            torch.ones(3, dtype=torch.bool),
        ),
    }


ACCEPT_CASES = (
    "random",
    "random_bf16",
    "random_fp16_k1",
    "boundary",
    "greedy",
    "tails",
    "strided",
    "k0",
)
CATEGORICAL_CASES = ("random", "random_f64", "boundary", "tile_boundary", "special", "one_token")
# Launch configurations: one program per row with several tiles per row (V = 90..300);
# split rows with one tile per chunk; split rows with chunks of several tiles.
CONFIGS = {
    "row64": ({"BLOCK": 64}, {"BELOW": 0}),
    "split64": ({}, {"BELOW": 1 << 30, "BLOCK": 64, "PROGRAMS": 528}),
    "split64x2": ({}, {"BELOW": 1 << 30, "BLOCK": 64, "PROGRAMS": 40}),
}


# --- the child: compare the kernels with the torch path ----------------------------------
def _compare_accept(args) -> str:
    """'' when every field equals the torch path's, else what differs."""
    from engine_under_test.sampling import speculative_accept
    from engine_under_test.sampling._dispatch import set_sampling_backend

    set_sampling_backend("torch")
    want = speculative_accept(*args)
    set_sampling_backend("triton")
    got = speculative_accept(*args)
    bad = [
        f"{name}: rows {(a != b).reshape(a.shape[0], -1).any(1).nonzero().flatten().tolist()}"
        for name, a, b in zip(want._fields, want, got, strict=True)
        if not torch.equal(_as_compared(name, a), _as_compared(name, b))
    ]
    return "; ".join(bad)


def _as_compared(name: str, value: torch.Tensor) -> torch.Tensor:
    """`invalid` compared as "some reason" vs "valid" (as in test_sampling_gpu.py): the
    Triton kernel flags an invalid stop-point law as UNCLASSIFIED, the torch path names
    the reason (accept.py)."""
    return value != 0 if name == "invalid" else value


def _compare_categorical(probs, u, valid) -> str:
    from engine_under_test.sampling import categorical
    from engine_under_test.sampling._dispatch import set_sampling_backend

    set_sampling_backend("torch")
    want = categorical(probs, u)
    set_sampling_backend("triton")
    got = categorical(probs, u)
    V = probs.shape[1]
    if not ((got >= 0) & (got < V)).all():
        return f"index out of [0, V): {got.tolist()}"
    positive = probs.double().clamp_min(0).gather(1, got[:, None]).squeeze(1) > 0
    if not positive[valid].all():
        return f"zero-weight token chosen in rows {(valid & ~positive).nonzero().tolist()}"
    diff = (valid & (want != got)).nonzero().flatten().tolist()
    return (
        f"rows {diff} differ: want {want[diff].tolist()} got {got[diff].tolist()}" if diff else ""
    )


def _negative_controls() -> dict[str, str]:
    """Each entry '' when the comparison CAN fail: a wrong sampler differs from the kernel."""
    from engine_under_test.sampling import speculative_accept
    from engine_under_test.sampling._dispatch import set_sampling_backend

    out = {}
    set_sampling_backend("triton")
    for name, case in (
        ("residual_from_p", boundary_accept()),
        ("bonus_off_by_one", random_accept()),
        ("shared_uniform", random_accept()),
    ):
        got = speculative_accept(*case)
        wrong = speculative_accept(*case, mutant=name)  # mutants always run the torch path
        out[f"mutant_{name}"] = "" if not torch.equal(got.tokens, wrong.tokens) else "no diff"
    from engine_under_test.sampling import categorical

    probs, u, _ = categorical_cases()["boundary"]
    cdf = probs.double().cumsum(-1)
    left = torch.searchsorted(cdf, (u[:, None] * cdf[:, -1:]), right=False).squeeze(-1)
    got = categorical(probs, u)
    out["left_closed_cdf"] = "" if (left != got).any() else "no diff"
    return out


def run_child() -> dict[str, str]:
    from engine_under_test.sampling import triton_categorical

    results = {}
    for label, (row, split) in CONFIGS.items():
        triton_categorical.SAMPLING_CONFIG.update(row)
        triton_categorical.SPLIT_CONFIG.update(split)
        for name, case in accept_cases().items():
            results[f"accept/{name}/{label}"] = _compare_accept(case)
        for name, case in categorical_cases().items():
            results[f"categorical/{name}/{label}"] = _compare_categorical(*case)
    results.update({f"control/{k}": v for k, v in _negative_controls().items()})
    return results


# --- the tests: one child, one verdict per case -------------------------------------------
@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    env.pop("ENGINE_UNDER_TEST_SAMPLING", None)
    done = subprocess.run(
        [sys.executable, __file__], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", ACCEPT_CASES)
def test_accept_kernel_equals_torch(verdicts, name, config):
    assert verdicts[f"accept/{name}/{config}"] == ""


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", CATEGORICAL_CASES)
def test_categorical_kernel_equals_torch(verdicts, name, config):
    assert verdicts[f"categorical/{name}/{config}"] == ""


@pytest.mark.parametrize(
    "control",
    [
        "mutant_residual_from_p",
        "mutant_bonus_off_by_one",
        "mutant_shared_uniform",
        "left_closed_cdf",
    ],
)
def test_negative_controls_differ_from_the_kernel(verdicts, control):
    assert verdicts[f"control/{control}"] == ""


def test_every_case_was_compared(verdicts):
    assert len(verdicts) == len(CONFIGS) * (len(ACCEPT_CASES) + len(CATEGORICAL_CASES)) + 4


def test_dispatch_switch():
    """CPU tensors take the torch path unless forced; float64 accept inputs always do."""
    from engine_under_test.sampling._dispatch import (
        sampling_backend,
        sampling_kernel_for,
        set_sampling_backend,
    )

    x = torch.zeros(2, 1, 4)
    assert sampling_backend() == "auto"
    assert sampling_kernel_for("categorical", x[:, 0]) is None  # auto: CUDA only
    try:
        set_sampling_backend("torch")
        assert sampling_kernel_for("categorical", x[:, 0]) is None
        set_sampling_backend("triton")
        assert sampling_kernel_for("speculative_accept", x.double(), x) is None
        with pytest.raises(ValueError, match="sampling backend must be one of"):
            set_sampling_backend("cuda")
    finally:
        set_sampling_backend("auto")


def test_bad_environment_value_is_a_clear_error():
    env = {**os.environ, "ENGINE_UNDER_TEST_SAMPLING": "fast", "PYTHONPATH": str(ROOT)}
    code = (
        "import torch; from engine_under_test.sampling import categorical; "
        "categorical(torch.ones(1, 3), torch.zeros(1, dtype=torch.float64))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ENGINE_UNDER_TEST_SAMPLING must be one of" in done.stderr


if __name__ == "__main__":
    print(json.dumps(run_child()))
