"""Sampler.probabilities_of_rows (reference_rows.py) against the row-by-row reference.

The vectorized reference feeds teacher forcing and the batched reference replay, so it
must be the reference: bit for bit equal to `Sampler.probabilities` row by row on CPU,
over the cases where a filter decides by a tie or a boundary (ties at the k-th logit,
top-p mass reached exactly, equal probabilities across the cut, greedy ties, -inf and
huge logits, reduced-precision inputs, more rows than one chunk)."""

import pytest
import torch

from engine_under_test.params import SamplingParams
from engine_under_test.sampling import Sampler
from engine_under_test.sampling import reference_rows as rr

PARAMS = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.3, top_k=1),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=0.6, top_k=20, top_p=0.9),
    SamplingParams(temperature=1.0, top_k=3, top_p=0.5),
    SamplingParams(temperature=2.0, top_p=0.3),
    SamplingParams(temperature=1.0, top_k=4, top_p=0.999999),
]


def _row_loop(logits, params):
    return torch.stack([Sampler.probabilities(row, params) for row in logits])


def _logits(seed: int, n: int, V: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, V, generator=g) * 3
    x[0, :] = 0.0  # every logit tied: the filters' ties, greedy's first index
    x[1, :4] = x[1].max() + 1  # four tied maxima
    x[2, : V // 2] = 1.0  # a tie straddling the k-th value
    x[2, V // 2 :] = -1.0
    x[3, 5:] = float("-inf")  # a row with 5 finite logits
    x[4] = torch.round(x[4])  # many equal probabilities across the top-p cut
    x[5, 0] = 80.0  # one token holds all the mass (top-p reached at the first)
    return x


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"T{p.temperature}-k{p.top_k}-p{p.top_p}")
def test_equal_to_the_row_loop_bit_for_bit(params):
    for seed, (n, V) in enumerate([(8, 16), (40, 257), (300, 64)]):  # 300 rows: 3 chunks
        x = _logits(seed, n, V)
        want = _row_loop(x, params)
        got = Sampler.probabilities_of_rows(x, params)
        assert got.dtype == torch.float32 and got.shape == (n, V)
        assert torch.equal(got, want), (seed, n, V)


def test_exact_top_p_boundaries():
    # Probabilities that are multiples of 1/8: the running mass hits top_p exactly.
    x = torch.log(torch.tensor([[4.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 5.0]]))
    for top_p in (0.5, 0.75, 0.875, 1.0 - 2**-24):
        params = SamplingParams(temperature=1.0, top_p=top_p)
        assert torch.equal(Sampler.probabilities_of_rows(x, params), _row_loop(x, params))


def test_reduced_precision_and_float64_inputs():
    x = _logits(7, 20, 100)
    params = SamplingParams(temperature=0.9, top_k=10, top_p=0.8)
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        xd = x.to(dtype)
        assert torch.equal(Sampler.probabilities_of_rows(xd, params), _row_loop(xd, params))


def test_chunking_changes_nothing(monkeypatch):
    x = _logits(3, 50, 33)
    params = SamplingParams(temperature=1.0, top_k=7, top_p=0.7)
    whole = Sampler.probabilities_of_rows(x, params)
    monkeypatch.setattr(rr, "CHUNK_ROWS", 7)
    assert torch.equal(Sampler.probabilities_of_rows(x, params), whole)


def test_negative_control_a_wrong_cut_is_seen():
    """The comparison above can fail: keeping one token past the top-p cut (the
    classic off-by-one) differs from the reference on these rows."""
    x = _logits(11, 30, 50)
    params = SamplingParams(temperature=1.0, top_p=0.6)
    probs = torch.softmax(x, -1)
    s, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    n_keep = (torch.cumsum(s.double(), -1) >= 0.6).to(torch.int8).argmax(-1) + 2  # one too many
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(
        1, order, torch.arange(50) < n_keep[:, None]
    )
    wrong = torch.softmax(torch.where(keep, x, float("-inf")), -1)
    assert not torch.equal(wrong, Sampler.probabilities_of_rows(x, params))


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        Sampler.probabilities_of_rows(torch.zeros(5), SamplingParams())
    with pytest.raises(ValueError, match="SamplingParams"):
        Sampler.probabilities_of_rows(torch.zeros(2, 5), {"temperature": 1.0})


@pytest.mark.gpu
def test_cuda_equal_to_the_row_loop_in_support_and_within_rounding():
    x = _logits(5, 200, 49152).cuda()
    for params in PARAMS:
        want = _row_loop(x, params)
        got = Sampler.probabilities_of_rows(x, params)
        assert torch.equal(got > 0, want > 0)
        assert (got - want).abs().max().item() <= 1e-6
