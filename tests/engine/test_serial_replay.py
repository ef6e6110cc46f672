"""SerialReplay (model/serial_replay.py): the last prefix's forward kept, so the laws a
check asks of one prefix in a row (p, q, then both unfiltered) cost one forward, and
every logit is bit for bit that of a fresh ``reference_logits`` forward, whatever the
order of the depths asked."""

import pytest
import torch

from engine_under_test import DEFAULT_PROMPT, LLM, ModelConfig, SamplingParams
from engine_under_test.model import build_model
from engine_under_test.model.llama import LlamaLM
from engine_under_test.model.serial_replay import SerialReplay
from engine_under_test.sampling import Sampler


def _models():
    looped = build_model(ModelConfig.preset("tiny", seed=0), torch.device("cpu"), torch.float32)
    # A random-weight Llama trunk in 2 stages (build_model loads only real checkpoints).
    llama_cfg = ModelConfig.preset("tiny", seed=0).replace(
        architecture="llama", stage_layers=(1, 2)
    )
    llama = LlamaLM(llama_cfg, device=torch.device("cpu"), dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in llama.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return {"looped": looped, "llama": llama}


MODELS = _models()
PREFIXES = [list(DEFAULT_PROMPT), list(DEFAULT_PROMPT) + [7, 9], [5], list(DEFAULT_PROMPT)[:4]]


def _fresh(model, prefix, depth):
    return model.reference_logits(list(prefix), loops=depth)[-1]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("order", ["shallow_first", "deep_first", "repeated"])
def test_every_depth_equals_a_fresh_forward(name, order):
    model = MODELS[name]
    S = model.num_stages
    depths = {
        "shallow_first": list(range(1, S + 1)),
        "deep_first": list(range(S, 0, -1)),
        "repeated": [S, 1, S, 1, S],
    }[order]
    replay = SerialReplay(model)
    for prefix in PREFIXES:  # each new prefix replaces the kept forward
        for depth in depths:
            got = replay.last_logits(prefix, depth)
            assert torch.equal(got, _fresh(model, prefix, depth)), (prefix, depth)


def test_a_new_prefix_is_not_answered_from_the_old_one():
    # Negative control of the key: the kept forward must not leak into another prefix
    # (prefixes differing only in the last token give other logits).
    model = MODELS["looped"]
    replay = SerialReplay(model)
    a = replay.last_logits(PREFIXES[1], model.num_stages).clone()
    b = replay.last_logits(PREFIXES[1][:-1] + [8], model.num_stages)
    assert not torch.equal(a, b)
    assert torch.equal(b, _fresh(model, PREFIXES[1][:-1] + [8], model.num_stages))


def _count_stages(monkeypatch, model) -> list[tuple[int, int]]:
    """The (start, stop) of every ``run_loops`` call on ``model``'s class from now on."""
    calls: list[tuple[int, int]] = []
    original = type(model).run_loops

    def counting(self, h, start, stop, cache, ctx):
        calls.append((start, stop))
        return original(self, h, start, stop, cache, ctx)

    monkeypatch.setattr(type(model), "run_loops", counting)
    return calls


def test_one_forward_serves_p_q_and_the_unfiltered_laws(monkeypatch):
    llm = LLM(ModelConfig.preset("tiny", seed=0), device="cpu")
    calls = _count_stages(monkeypatch, llm.model)
    filtered = SamplingParams(temperature=0.8, top_k=5, top_p=0.9)
    bare = SamplingParams(temperature=0.8)
    prefix = list(DEFAULT_PROMPT) + [3]
    laws = [
        llm.target_probabilities(prefix, filtered),
        llm.target_probabilities(prefix, bare),
        llm.draft_probabilities(prefix, filtered, 2),
        llm.draft_probabilities(prefix, bare, 2),
    ]
    R = llm.model.num_loops
    assert calls == [(s, s + 1) for s in range(R)]  # each stage once, for all four laws
    monkeypatch.undo()
    fresh = LLM(ModelConfig.preset("tiny", seed=0), device="cpu", model=llm.model)
    fresh._serial_replay = SerialReplay(llm.model)
    for law, (fn, params, extra) in zip(
        laws,
        [
            (fresh.target_probabilities, filtered, ()),
            (fresh.target_probabilities, bare, ()),
            (fresh.draft_probabilities, filtered, (2,)),
            (fresh.draft_probabilities, bare, (2,)),
        ],
        strict=True,
    ):
        fresh._serial_replay.clear()
        assert torch.equal(law, fn(prefix, params, *extra))


def test_rejects_bad_depth_and_empty_prefix():
    replay = SerialReplay(MODELS["looped"])
    with pytest.raises(ValueError, match="exit depth"):
        replay.last_logits([1, 2], 0)
    with pytest.raises(ValueError, match="at least one token"):
        replay.last_logits([], 1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_position_equals_a_fresh_forward(name):
    # Teacher forcing reads every row of the kept forward (``logits``): each depth's
    # [T, V] equals a fresh reference_logits bit for bit, the deep one asked first (the
    # adapter's order: p, then q of the same generation).
    model = MODELS[name]
    S = model.num_stages
    replay = SerialReplay(model)
    for prefix in PREFIXES:
        for depth in [S, *range(1, S)]:
            got = replay.logits(prefix, depth)
            assert got.shape == (len(prefix), model.cfg.vocab_size)
            assert torch.equal(got, model.reference_logits(list(prefix), loops=depth))


def test_teacher_forced_p_and_q_share_one_forward(monkeypatch):
    llm = LLM(ModelConfig.preset("tiny", seed=0), device="cpu")
    params = SamplingParams(temperature=0.9, top_k=7, top_p=0.95)
    prompt, tokens = list(DEFAULT_PROMPT), [3, 11, 5, 2]
    calls = _count_stages(monkeypatch, llm.model)
    p = llm.teacher_forced_probabilities(prompt, tokens, params)
    q = llm.teacher_forced_probabilities(prompt, tokens, params, 2)
    R = llm.model.num_loops
    assert calls == [(s, s + 1) for s in range(R)]  # q read the state p passed through
    monkeypatch.undo()
    # Bit for bit the laws of fresh forwards, each from the model itself.
    seq = prompt + tokens[:-1]
    for law, depth in ((p, R), (q, 2)):
        fresh = llm.model.reference_logits(seq, loops=depth)[len(prompt) - 1 :]
        assert torch.equal(law, Sampler.probabilities_of_rows(fresh, params))
