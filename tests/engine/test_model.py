"""The looped model: determinism, per-depth KV, incremental decode, draft quality."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import DEFAULT_PROMPT, ModelConfig
from engine_under_test.model import build_model
from engine_under_test.model.init import MEASURED_TV


@pytest.fixture(scope="module")
def tiny():
    return build_model(ModelConfig.preset("tiny", seed=0))


def test_presets_shapes():
    o = ModelConfig.preset("ouro-1.4b")
    assert (
        o.num_hidden_layers,
        o.hidden_size,
        o.num_attention_heads,
        o.head_dim,
        o.intermediate_size,
        o.total_ut_steps,
        o.vocab_size,
    ) == (24, 2048, 16, 128, 5632, 4, 49152)
    assert ModelConfig.preset("small").vocab_size == 49152
    with pytest.raises(ValueError):
        ModelConfig.preset("nope")
    assert all(0 <= t < 512 for t in DEFAULT_PROMPT)


def test_deterministic_weights():
    a = build_model(ModelConfig.preset("tiny", seed=3))
    b = build_model(ModelConfig.preset("tiny", seed=3))
    c = build_model(ModelConfig.preset("tiny", seed=4))
    for (n, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), n
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)


def test_incremental_decode_matches_full_forward(tiny):
    """Prefill + one-token steps through the per-depth cache == one full forward."""
    toks = list(DEFAULT_PROMPT) + [5, 77, 300, 1]
    full = tiny.reference_logits(toks)  # [T, V]
    cache = tiny.new_cache(2, 64)
    rows = torch.tensor([1])
    n = len(DEFAULT_PROMPT)
    ctx = tiny.context(torch.arange(n)[None], rows, cache.max_len, prefix=False)
    h = tiny.run_loops(tiny.embed(torch.tensor([DEFAULT_PROMPT])), 0, 4, cache, ctx)
    got = [tiny.logits(h[0])]
    for i in range(n, len(toks)):
        ctx = tiny.context(torch.tensor([[i]]), rows, cache.max_len, prefix=False)
        h = tiny.run_loops(tiny.embed(torch.tensor([[toks[i]]])), 0, 4, cache, ctx)
        got.append(tiny.logits(h[0]))
    torch.testing.assert_close(torch.cat(got), full, atol=1e-4, rtol=1e-4)


def test_each_depth_has_its_own_kv_namespace(tiny):
    """Loops 0..d-1 write only the shallow namespaces; continuing from h_d writes the rest
    and equals the full-depth forward (self-speculation recomputes nothing)."""
    R, d = tiny.num_loops, 2
    ids = torch.tensor([DEFAULT_PROMPT])
    T = ids.shape[1]
    cache = tiny.new_cache(1, 32)
    ctx = tiny.context(torch.arange(T)[None], torch.tensor([0]), 32, prefix=True)
    h_d = tiny.run_loops(tiny.embed(ids), 0, d, cache, ctx)
    assert cache.k[:d, :, 0, :, :T].abs().sum() > 0
    assert cache.k[d:].abs().sum() == 0  # deep namespaces untouched
    h_R = tiny.run_loops(h_d, d, R, cache, ctx)
    # (the reference uses a 12-position cache: attention reductions differ in rounding)
    tol = dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(tiny.logits(h_R[0]), tiny.reference_logits(DEFAULT_PROMPT), **tol)
    torch.testing.assert_close(tiny.logits(h_d[0]), tiny.reference_logits(DEFAULT_PROMPT, d), **tol)
    assert not torch.allclose(cache.k[0], cache.k[1])  # depths differ


def _tv(model, d):
    p = torch.softmax(model.reference_logits(DEFAULT_PROMPT)[-1], -1)
    q = torch.softmax(model.reference_logits(DEFAULT_PROMPT, d)[-1], -1)
    return 0.5 * (p - q).abs().sum().item()


def test_draft_approximates_target(tiny):
    """First-position TV(p, q_d) on DEFAULT_PROMPT, T=1: the recorded values, decreasing
    in d, in the range of a real Ouro-1.4B (about 0.35 and 0.09)."""
    tv = [_tv(tiny, d) for d in (1, 2, 3)]
    assert tv[0] > tv[1] > tv[2] > 0
    assert 0.25 < tv[0] < 0.45 and 0.05 < tv[1] < 0.15
    assert tv[0] == pytest.approx(MEASURED_TV["tiny"][0], abs=2e-3)
    assert tv[1] == pytest.approx(MEASURED_TV["tiny"][1], abs=2e-3)


def test_t1_has_a_few_dominant_values(tiny):
    """top_k=20 at T=1: a handful of tokens each carry a large share (t1 strata)."""
    p = torch.softmax(tiny.reference_logits(DEFAULT_PROMPT)[-1], -1)
    top = p.sort(descending=True).values
    assert top[0] < 0.6
    assert (top > 0.05).sum() >= 3
    assert top[:6].sum() > 0.75


def test_building_a_model_imports_nothing_heavy_and_draws_nothing():
    """build_model allocates on the device directly (layers.allocate): meta + to_empty
    imported torch.fx's symbolic shapes and sympy, 0.5 s of every process's start-up.
    Also checked: the build leaves torch's global generator where it was (every weight
    comes from the config's own generator). In a fresh process, against what `import
    torch` alone loads."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "state = torch.random.get_rng_state()\n"
        "from engine_under_test import ModelConfig\n"
        "from engine_under_test.model import build_model\n"
        "build_model(ModelConfig.preset('tiny', seed=0))\n"
        "new = set(sys.modules) - before\n"
        "print(sorted(m for m in new if m.startswith(('sympy', 'torch.fx', 'torch._dynamo'))))\n"
        "print(torch.equal(state, torch.random.get_rng_state()))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr
    heavy, rng_untouched = done.stdout.strip().splitlines()[-2:]
    assert heavy == "[]" and rng_untouched == "True", done.stdout
