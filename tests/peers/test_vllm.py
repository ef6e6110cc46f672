"""vLLM 0.33.0 adapters (specconform/adapters/peers/vllm.py): on CPU in Triton's
interpreter, on CUDA where a GPU is present (conftest.PEER_DEVICE)."""

import numpy as np
import pytest

from specconform.adapters.kernel import CheckedKernel, ensure_uses_uniforms
from specconform.adapters.peers import vllm as peer  # imports vllm lazily
from specconform.util.errors import UsageError
from tests.peers.conftest import (
    PEER_DEVICE,
    joint_pvalue,
    single_draft_case,
    skip_unless_importable,
)

pytest.importorskip("vllm", reason=f"vllm is not installed: pip install {peer.INSTALL}")
skip_unless_importable(lambda: peer.accept_kernel(device=PEER_DEVICE))


def test_forward_matches_the_joint_law():
    """Black-box forward: per-request temperatures, greedy rows riding along, seeded and
    unseeded requests; the first position follows min(p, q) / (p - q)+."""
    p, q, P, Q, d, lens, u = single_draft_case(1500, seed=1)
    k = CheckedKernel(peer.forward(device=PEER_DEVICE), "vllm:forward")
    out = k.accept(P, Q, d, lens, u)
    assert not out.error.any()  # greedy rows matched their argmax chains
    assert joint_pvalue(out, p, q) > 1e-4
    bonus = out.tokens[out.num_accepted == 1, 1]
    assert np.all(P[0, 1][bonus] > 0)


def test_forward_is_black_box():
    p, q, P, Q, d, lens, u = single_draft_case(4)
    with pytest.raises(Exception, match="black-box"):
        ensure_uses_uniforms(peer.forward(device=PEER_DEVICE), P[:1], Q[:1], np.flatnonzero(q), 6)


def test_wrong_temperature_fails():
    """Negative control: logits built for temperature 1 while the metadata says 0.7 / 1.5
    (the misuse the issue names): the joint test must fail."""
    p, q, P, Q, d, lens, u = single_draft_case(1500, seed=2)
    out = peer.forward(device=PEER_DEVICE, mutant="wrong_temperature").accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) < 1e-6


def test_accept_kernel_is_white_box_and_exact_in_the_interior():
    p, q, P, Q, d, lens, u = single_draft_case(1500, seed=3)
    k = peer.accept_kernel(device=PEER_DEVICE)
    ensure_uses_uniforms(k, P[:1], Q[:1], np.flatnonzero(q), 6)  # does not raise
    out = k.accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) > 1e-4


def test_accept_kernel_accepts_a_zero_mass_draft_at_coin_zero():
    """vLLM accepts iff target_prob / draft_prob >= coin: at coin 0 a draft of zero
    target mass is accepted (its coins are float64 torch.rand: probability 2^-53 per
    draft). Pinned here so that a change in vLLM shows; docs/peers.md reports it."""
    p, q, P, Q, d, lens, u = single_draft_case(2)
    d[:] = 5  # q(5) = 0.35, p(5) = 0
    u[:, 0] = [0.0, 1e-300]
    out = peer.accept_kernel(device=PEER_DEVICE).accept(P, Q, d, lens, u)
    assert out.num_accepted.tolist() == [1, 0]
    assert out.tokens[0, 0] == 5 and p[5] == 0


def test_missing_peer_is_one_line(monkeypatch):
    monkeypatch.setattr("specconform.adapters.peers.installed_version", lambda dist: None)
    with pytest.raises(UsageError) as err:
        peer.forward(device=PEER_DEVICE)
    assert "\n" not in str(err.value) and "pip install vllm==0.33.0" in str(err.value)


def test_other_version_warns_once_naming_the_tested_one(monkeypatch, capsys):
    monkeypatch.setattr("specconform.adapters.peers.installed_version", lambda dist: "0.1.0")
    peer.accept_kernel(device=PEER_DEVICE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vllm==0.33.0" in err[0]


def test_unknown_mutant_is_usage_error():
    with pytest.raises(UsageError):
        peer.forward(device=PEER_DEVICE, mutant="nope")


def test_staged_calls_launch_the_same_kernels_on_device_tensors():
    """bench/peer_accept_timing.py --kernel-only: the staged white-box call gives the
    accept()'s tokens on the same coins (every row at length K, as staged); forward's
    staged call returns vLLM's output on the device."""
    p, q, P, Q, d, lens, u = single_draft_case(64, seed=4)
    k = peer.accept_kernel(device=PEER_DEVICE)
    staged = k.staged(P, Q, d, u)().cpu().numpy()
    assert np.array_equal(staged[:, :2], k.accept(P, Q, d, lens, u).tokens)
    out = peer.forward(device=PEER_DEVICE).staged(P, Q, d, u)()
    assert tuple(out.sampled_token_ids.shape)[1] == 2
