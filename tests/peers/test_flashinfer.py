"""FlashInfer adapter: CUDA only. On CPU only its refusals are tested; the GPU run
(bench/peers_gpu.sh) runs protocols/peers/flashinfer.yaml and these GPU tests."""

import numpy as np
import pytest

from specconform.util.errors import UsageError
from tests.peers.conftest import joint_pvalue, single_draft_case


def test_cpu_is_refused_in_one_line():
    from specconform.adapters.peers import flashinfer as peer

    with pytest.raises(UsageError, match="CUDA only"):
        peer.chain(device="cpu")


def test_tempered_draft_law_is_a_law():
    from specconform.adapters.peers.flashinfer import tempered

    q = np.array([[0.5, 0.3, 0.2, 0.0]], np.float32)
    t = tempered(q, 0.5)
    assert abs(t.sum() - 1) < 1e-6 and t[0, 3] == 0 and t[0, 0] > q[0, 0]


@pytest.mark.gpu
def test_chain_matches_the_joint_law_and_misuse_fails():
    from specconform.adapters.peers import flashinfer as peer  # imports flashinfer lazily

    pytest.importorskip("flashinfer", reason=f"not installed: pip install {peer.INSTALL}")

    p, q, P, Q, d, lens, u = single_draft_case(20000, seed=1)
    out = peer.chain(device="cuda").accept(P, Q, d, lens, u)
    assert joint_pvalue(out, p, q) > 1e-4
    bad = peer.chain(device="cuda", mutant="wrong_draft_temperature").accept(P, Q, d, lens, u)
    assert joint_pvalue(bad, p, q) < 1e-6
