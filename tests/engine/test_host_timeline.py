"""bench/host_timeline.py: its per-phase timers account for the engine steps they wrap
(CPU, tiny preset; no timing is asserted beyond the accounting identity)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import host_timeline  # noqa: E402

from engine_under_test import LLM, ModelConfig, SpeculativeConfig  # noqa: E402
from engine_under_test.model import build_model  # noqa: E402


def test_phases_add_up_to_the_steps_and_count_prefills():
    model = build_model(ModelConfig.preset("tiny", seed=0))
    device = torch.device("cpu")
    ps = host_timeline.prompts(8, model.cfg.vocab_size)
    params = host_timeline.sampling("random", 8, 6)
    llm = LLM(
        model=model,
        speculative_config=SpeculativeConfig(3, "block", 2),
        async_scheduling=True,
        max_num_seqs=4,
    )
    timers = host_timeline.instrument(llm)
    r = host_timeline.timed_run(llm, timers, ps, params, device)
    assert r["tokens"] == 8 * 6 and r["steps"] > 0 and r["rounds"] > 0
    assert r["prefills"] >= 2  # 8 requests through 4 slots: at least one refill
    sec = r["seconds"]
    assert set(sec) <= set(host_timeline.PHASES)
    assert all(v >= 0 for k, v in sec.items() if k != "other") and sec["other"] > -1e-3
    assert sum(sec.values()) <= r["wall"] + 1e-3  # the phases happen inside the run
    assert not timers.enabled  # timing is off outside the run
