"""A quick sanity check of the committed law (specconform's protocols are the real test):
t1, and t2 given t1, against the serial reference p; first-draft rejection against TV."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from engine_under_test import (
    DEFAULT_PROMPT,
    LLM,
    SamplingParams,
    SpeculativeConfig,
)

PROMPT = list(DEFAULT_PROMPT)
N = 4000
MODES = {
    "nospec": dict(speculative_config=None),
    "sync": dict(speculative_config=SpeculativeConfig(3, "block", 2)),
    "async_d1": dict(speculative_config=SpeculativeConfig(3, "block", 1), async_scheduling=True),
}


def params(seed):
    return SamplingParams(temperature=1.0, top_k=20, seed=seed, max_tokens=3, ignore_eos=True)


def chi2_pvalue(observed: Counter, p: np.ndarray, n: int) -> float:
    """Pearson chi^2 with cells of expected count < 5 pooled; out-of-support is fatal."""
    assert all(p[t] > 0 for t in observed), "token outside the support of p"
    expected = p * n
    big = np.flatnonzero(expected >= 5)
    obs = np.array([observed.get(int(t), 0) for t in big], dtype=float)
    exp = expected[big]
    rest_obs, rest_exp = n - obs.sum(), n - exp.sum()
    if rest_exp >= 5:
        obs, exp = np.append(obs, rest_obs), np.append(exp, rest_exp)
    if len(obs) < 2:
        return 1.0  # one cell: nothing to test
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, len(obs) - 1))


@pytest.mark.parametrize("mode", list(MODES))
def test_t1_t2_follow_the_target_law(model, mode):
    offset = {"nospec": 0, "sync": 10**6, "async_d1": 2 * 10**6}[mode]  # disjoint seeds
    llm = LLM(model=model, **MODES[mode])
    outs = llm.generate([PROMPT] * N, [params(offset + i) for i in range(N)])
    t1 = Counter(o.token_ids[0] for o in outs)
    p1 = llm.target_probabilities(PROMPT, params(0)).double().numpy()
    assert chi2_pvalue(t1, p1, N) > 1e-3
    for first, count in t1.most_common(3):
        t2 = Counter(o.token_ids[1] for o in outs if o.token_ids[0] == first)
        p2 = llm.target_probabilities(PROMPT + [first], params(0)).double().numpy()
        assert chi2_pvalue(t2, p2, count) > 1e-3, f"t2 | t1={first}"
    if mode == "nospec":
        return
    # First draft position: P(reject) = E_t1 TV(p(.|t1), q(.|t1)).
    d = llm.speculative_config.draft_loops
    expected = 0.0
    for first, count in t1.items():
        p = llm.target_probabilities(PROMPT + [first], params(0))
        q = llm.draft_probabilities(PROMPT + [first], params(0), d)
        expected += count / N * 0.5 * float((p - q).abs().sum())
    rejected = sum(o.first_draft_accepted is False for o in outs)
    z = (rejected - N * expected) / math.sqrt(N * expected * (1 - expected))
    assert abs(z) < 4, (rejected / N, expected)
