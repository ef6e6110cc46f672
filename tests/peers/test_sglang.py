"""SGLang 0.5.23 adapters (specconform/adapters/peers/sglang.py): on CPU in Triton's
interpreter, on CUDA where a GPU is present (conftest.PEER_DEVICE)."""

import numpy as np
import pytest

from specconform.adapters.kernel import CheckedKernel, ensure_uses_uniforms
from specconform.adapters.peers import sglang as peer  # imports sglang lazily
from specconform.util.errors import UsageError
from tests.peers.conftest import (
    PEER_DEVICE,
    joint_pvalue,
    single_draft_case,
    skip_unless_importable,
)

# find_spec, not importorskip: `import sglang` pulls in its whole serving runtime.
if __import__("importlib").util.find_spec("sglang") is None:
    pytest.skip(f"sglang is not installed: pip install {peer.INSTALL}", allow_module_level=True)
skip_unless_importable(lambda: peer.chain(device=PEER_DEVICE))


def test_chain_matches_the_joint_law_and_is_white_box():
    p, q, P, Q, d, lens, u = single_draft_case(1200, seed=1)
    k = CheckedKernel(peer.chain(device=PEER_DEVICE), "sglang:chain")
    ensure_uses_uniforms(k, P[:1], Q[:1], np.flatnonzero(q), 6)
    out = k.accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) > 1e-4
    again = k.accept(P, Q, d, lens, u)
    assert np.array_equal(out.tokens, again.tokens)  # a function of its coins


def test_chain_ragged_lengths_and_edges():
    """Draft lengths 0..2 in one call (each length its own kernel call); coins at 0 and
    just below 1 never commit a zero-mass token."""
    p, q, P, Q, d, lens, u = single_draft_case(6)
    P2 = np.concatenate([P, P[:, 1:]], axis=1)  # [n, 3, V]
    Q2 = np.concatenate([Q, Q], axis=1)  # [n, 2, V]
    d2 = np.concatenate([d, d], axis=1)
    lens = np.array([0, 1, 2, 0, 1, 2])
    u = np.tile([[0.0], [np.nextafter(1.0, 0.0)]], (3, 5))
    out = peer.chain(device=PEER_DEVICE).accept(P2, Q2, d2, lens, u)
    assert np.all(out.num_accepted <= lens)
    for row, n in zip(out.tokens, out.num_accepted, strict=True):
        committed = row[: n + 1]
        assert np.all(committed >= 0) and np.all(row[n + 1 :] == -1)
        assert P2[0, n][committed[-1]] > 0


def test_blackbox_is_refused_by_quadrature():
    p, q, P, Q, d, lens, u = single_draft_case(4)
    with pytest.raises(Exception, match="black-box"):
        ensure_uses_uniforms(
            peer.chain_blackbox(device=PEER_DEVICE), P[:1], Q[:1], np.flatnonzero(q), 6
        )


def test_blackbox_matches_the_joint_law():
    p, q, P, Q, d, lens, u = single_draft_case(1200, seed=2)
    out = peer.chain_blackbox(device=PEER_DEVICE).accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) > 1e-4


def test_unnormalised_target_fails():
    """Negative control: target probabilities after a top-k mask without renormalising
    (SGLang's caller renormalises with top_k_renorm_prob): the joint test must fail."""
    p, q, P, Q, d, lens, u = single_draft_case(1200, seed=3)
    out = peer.chain(device=PEER_DEVICE, mutant="unnormalised_target").accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) < 1e-6


def test_missing_peer_is_one_line(monkeypatch):
    monkeypatch.setattr("specconform.adapters.peers.installed_version", lambda dist: None)
    with pytest.raises(UsageError) as err:
        peer.chain(device=PEER_DEVICE)
    assert "\n" not in str(err.value) and "pip install sglang==0.5.23" in str(err.value)


def test_staged_call_launches_the_kernel_on_device_tensors():
    """bench/peer_accept_timing.py --kernel-only: the staged call runs the kernel on the
    staged tensors (every row at length K) and returns nothing to the host; it must not
    raise on repeated calls (outputs allocated per call)."""
    p, q, P, Q, d, lens, u = single_draft_case(16, seed=4)
    launch = peer.chain(device=PEER_DEVICE).staged(P, Q, d, u)
    assert launch() is None and launch() is None
