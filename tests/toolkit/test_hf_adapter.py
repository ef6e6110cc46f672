"""The transformers adapter on a tiny randomly initialised LlamaForCausalLM built in
process (no download): its p is transformers' own processed sampling law, its q is
transformers' early exit, assisted generation passes a small distribution protocol, and a
draft law perturbed between transformers' drafter and its verifier fails it.

The protocol below is pre-registered at alpha = 0.01 per test with fixed seeds, so the
clean PASS is deterministic (a fresh seed range would falsely fail with probability at
most 4 x 0.01). The planted bug (drafts scored with a q rolled by one token, not the q
they were drawn from) moves p(t2 | t1): at these fixed seeds the t2 fit fails with
p = 1.1e-6 and the homogeneity test with p = 2.1e-3 (deterministic, so no flake; the t1
fits are not moved at this size: p = 0.21 / 0.11 as in the clean run, whose t2 fit,
homogeneity and acceptance read p = 0.64 / 0.30 / 0.78). The nospec group runs as one
batched plain generate call (batch_size 450, seeded by its first seed).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from specconform.adapters.hf import HFEngine, factory, processed_law, processors  # noqa: E402
from tests.toolkit.cli_helpers import run_cli  # noqa: E402
from tests.toolkit.fixtures.adapter_protocol import adapter_protocol  # noqa: E402

HERE = "tests.toolkit.test_hf_adapter"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper logits than the default init: a less uniform law
        for p in model.parameters():
            p.mul_(3.0)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    return path


def _protocol(tiny_dir, **engine) -> dict:
    engine = {"top_k": 3, "prompt": [1, 2, 3, 4], **engine}  # the caller's fields win
    adapter = engine.pop("adapter", "hf")  # a planted adapter replaces hf
    return adapter_protocol(
        "hf_tiny",
        adapter,
        {"model": str(tiny_dir), "threads": 1},
        seeds=450,
        batch_size=450,
        strata={"min_samples": 100},
        tests=[
            {"name": "t1_nospec", "type": "t1_gof", "role": "prerequisite", "groups": ["nospec"]},
            {"name": "t1_sync", "type": "t1_gof", "role": "prerequisite", "groups": ["sync"]},
            {"name": "t2_sync", "type": "t2_gof", "role": "primary", "groups": ["sync"]},
            {
                "name": "t2_sync_vs_nospec",
                "type": "t2_homogeneity",
                "role": "primary",
                "groups": ["sync", "nospec"],
            },
            {
                "name": "acceptance_sync",
                "type": "acceptance",
                "role": "mechanism",
                "groups": ["sync"],
            },
        ],
        **engine,
    )


def _spec(tiny_dir, **engine):
    from specconform.protocol.load import validate

    return validate(_protocol(tiny_dir, **engine), "<test>").engine


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 4, 0.7)]
)
def test_p_is_transformers_processed_sampling_law(tiny_dir, temperature, top_k, top_p):
    """The adapter's p equals softmax of the scores transformers samples from (its own
    generate with output_scores) on the random model's logits, for four settings."""
    engine = HFEngine(
        _spec(tiny_dir, temperature=temperature, top_k=top_k, top_p=top_p),
        factory(_spec(tiny_dir)).options,
        log=lambda line: None,
    )
    from transformers import GenerationConfig

    for prefix in ([1, 2, 3, 4], [5, 9], [7, 7, 7, 1, 0, 3]):
        ids = torch.tensor([prefix])
        gc = GenerationConfig(
            do_sample=True,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            max_new_tokens=1,
            eos_token_id=None,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        out = engine.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        theirs = torch.softmax(out.scores[0][0].float(), -1).double().numpy()
        ours = engine.target_law(prefix)
        assert np.max(np.abs(ours - theirs)) < 1e-7
        if top_k or top_p < 1:
            assert np.count_nonzero(ours) < ours.size  # the filters really acted


def test_processed_law_on_random_logits_matches_transformers_builder(tiny_dir):
    """Same warpers, same order as GenerationMixin._get_logits_processor builds them."""
    from transformers import GenerationConfig

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    rng = np.random.Generator(np.random.PCG64(1))
    ids = torch.tensor([[1, 2]])
    for T, k, p in [(0.5, 7, 0.9), (2.0, 0, 0.5), (1.0, 20, 0.95)]:
        gc = GenerationConfig(do_sample=True, temperature=T, top_k=k, top_p=p)
        theirs = model._get_logits_processor(
            generation_config=gc, input_ids_seq_length=2, device="cpu"
        )
        for _ in range(5):
            logits = torch.tensor(rng.normal(0, 3, 200), dtype=torch.float32)
            want = torch.softmax(theirs(ids, logits[None].clone()), -1)[0].double().numpy()
            got = processed_law(logits, processors(T, k, p), ids)
            assert np.max(np.abs(got - want)) < 1e-7


def test_q_is_the_early_exit_law(tiny_dir):
    """q at depth d = final norm + LM head on the hidden state after d layers."""
    engine = factory(_spec(tiny_dir))
    prefix = [1, 2, 3, 4, 5]
    ids = torch.tensor([prefix])
    with torch.inference_mode():
        hs = engine.model(input_ids=ids, output_hidden_states=True).hidden_states
        for d in (1, 2):
            logits = engine.model.lm_head(engine.model.model.norm(hs[d]))[0, -1]
            want = processed_law(logits, processors(1.0, 3, 1.0), ids)
            assert np.max(np.abs(engine.draft_law(prefix, d) - want)) < 1e-6
    full = engine.target_law(prefix)
    assert np.abs(engine.draft_law(prefix, 1) - full).sum() > 1e-3  # q really differs


def test_assisted_generation_passes_and_records_the_adapter(tiny_dir, tmp_path):
    path = tmp_path / "hf_tiny.yaml"
    path.write_text(yaml.safe_dump(_protocol(tiny_dir)))
    proc = run_cli("run", path, "--out", tmp_path / "out", "--no-sign")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    run_dir = next(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    adapter = json.loads((run_dir / "run.json").read_text())["engine_adapter"]
    assert adapter["name"] == "transformers-assisted-generation"
    assert adapter["capabilities"]["black_box"] is True
    assert adapter["packages"]["transformers"] == transformers.__version__
    rows = {r["test"]: r for r in json.loads((run_dir / "results/tests.json").read_text())}
    assert rows["t2_sync"]["df"] > 0 and rows["acceptance_sync"]["n"] > 0  # real evidence


def test_plan_replays_the_laws_through_the_protocols_adapter(tiny_dir, tmp_path):
    """`specconform plan` without --reference replays p and q through the protocol's own
    engine adapter (here hf), not the bundled engine: a finite detectable TV for the
    tests that need p and q, the t3 row unplanned."""
    path = tmp_path / "hf_tiny.yaml"
    path.write_text(yaml.safe_dump(_protocol(tiny_dir)))
    proc = run_cli("plan", path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {
        line.split("|")[1].strip(): line.split("|")
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| test")
    }
    for name in ("t1_nospec", "t2_sync", "t2_sync_vs_nospec", "acceptance_sync"):
        assert float(rows[name][8]) < 1.0, rows[name]  # evidence expected: finite TV


class _ScoredWithWrongQ(HFEngine):
    """Negative control: transformers' drafts scored with the draft logits rolled by one
    token (a q other than the one they were drawn from), planted between drafter and
    verifier: the bug class "draft scored with the wrong q"."""

    def _hook_telemetry(self):
        super()._hook_telemetry()
        hooked = self.model._get_candidate_generator

        def planted(*args, **kwargs):
            gen = hooked(*args, **kwargs)
            get = gen.get_candidates

            def wrong_q(*a, **k):
                ids, logits = get(*a, **k)
                return ids, (None if logits is None else logits.roll(1, dims=-1))

            gen.get_candidates = wrong_q
            return gen

        self.model._get_candidate_generator = planted


def planted_hf(spec, *, mutant=None, log=print):
    from specconform.adapters.hf import HFOptions

    return _ScoredWithWrongQ(spec, HFOptions(**spec.options), log=log)


def test_planted_draft_law_through_the_hf_adapter_fails(tiny_dir, tmp_path):
    data = _protocol(tiny_dir, adapter=f"{HERE}:planted_hf")
    data["name"] = "hf_tiny_planted"
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("run", path, "--out", tmp_path / "out", "--no-sign")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    run_dir = next(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    failed = json.loads((run_dir / "verdict.json").read_text())["failed"]
    assert "t2_sync" in failed, failed


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"groups": [{"name": "async", "mode": "async", "draft_loops": 1}]},
            "transformers has no async mode",
        ),
        (
            {"groups": [{"name": "sync", "mode": "sync", "draft_loops": 3}]},
            "groups.draft_loops: early exit after 3 layers; the model has 3",
        ),
        ({"engine": {"options": {"model": "/nonexistent/dir"}}}, "does not exist"),
        ({"engine": {"options": {"gguf_file": "x.gguf", "model": "y"}}}, "exactly one of"),
        ({"engine": {"options": {"modle": "y"}}}, "engine.options.modle: Extra inputs"),
    ],
)
def test_bad_hf_configuration_is_one_line_exit_2(tiny_dir, tmp_path, change, message):
    data = _protocol(tiny_dir)
    if "groups" in change:
        data["groups"] = change["groups"]
        data["tests"] = [
            {
                "name": "t1",
                "type": "t1_gof",
                "role": "prerequisite",
                "groups": [change["groups"][0]["name"]],
            }
        ]
    else:
        data["engine"].update(change["engine"])
    data["seeds"]["count"] = 5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    # 5 seeds give no stratum evidence: allowed, the bad engine setting is under test
    proc = run_cli("run", path, "--out", tmp_path / "out", "--no-sign", "--allow-inconclusive")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    # stderr: the error line (plus only the documented `timing:` diagnostics)
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("timing:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()
