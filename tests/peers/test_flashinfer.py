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


class StandInSampling:
    """FlashInfer 0.7's ``chain_speculative_sampling`` contract on the CPU: the call
    signature and the return triple ``(output_token_ids [B, L+1] int32 padded with -1,
    output_accepted_token_num [B], output_emitted_draft_token_num [B])``, with a correct
    chain rejection sampler inside. It checks what the adapter does with FlashInfer's
    answer (the GPU run found the adapter reading a tuple as a tensor); the kernel's own
    law is the GPU test's."""

    def chain_speculative_sampling(
        self, draft_probs, draft_token_ids, target_probs, *, deterministic, generator
    ):
        import torch

        b, n, _ = draft_probs.shape
        out = torch.full((b, n + 1), -1, dtype=torch.int32)
        emitted = torch.zeros(b, dtype=torch.int32)
        for i in range(b):
            for j in range(n + 1):
                p = target_probs[i, j]
                if j == n:  # every draft accepted: the bonus from p_n
                    out[i, j] = torch.multinomial(p, 1, generator=generator)[0]
                    break
                t = int(draft_token_ids[i, j])
                qt, pt = float(draft_probs[i, j, t]), float(p[t])
                if float(torch.rand((), generator=generator)) * qt < pt:
                    out[i, j], emitted[i] = t, j + 1
                    continue
                out[i, j] = torch.multinomial(
                    (p - draft_probs[i, j]).clamp(min=0), 1, generator=generator
                )[0]
                break
        return out, torch.zeros(b, dtype=torch.int32), emitted


def test_adapter_reads_flashinfers_return_triple():
    """On the stand-in the adapter's tokens follow the joint law and its planted misuse
    is refuted. Fixed seeds; n = 4000 rows: the correct sampler's p-value is one fixed
    number (> 1e-4 asserted, the montecarlo test's level); the mutant (draft law at T 0.5)
    shifts the first cell's mass by ~0.1, a chi-square of order 100 on 11 df, so p < 1e-6
    holds with power ~1 (measured p-value below 1e-20)."""
    from specconform.adapters.peers.flashinfer import FlashinferChain

    p, q, P, Q, d, lens, u = single_draft_case(4000, seed=3)
    out = FlashinferChain(StandInSampling(), None, "stand-in", device="cpu").accept(
        P, Q, d, lens, u
    )
    assert out.tokens.shape == (4000, 2) and set(np.unique(out.num_accepted)) <= {0, 1}
    assert np.array_equal(out.num_accepted, (out.tokens >= 0).sum(axis=1) - 1)
    assert joint_pvalue(out, p, q) > 1e-4
    bad = FlashinferChain(StandInSampling(), "wrong_draft_temperature", "stand-in", device="cpu")
    assert joint_pvalue(bad.accept(P, Q, d, lens, u), p, q) < 1e-6


def test_staged_call_runs_on_device_tensors():
    """bench/peer_accept_timing.py --kernel-only on the stand-in: the staged call passes
    FlashInfer's argument order and returns its triple, left on the device."""
    from specconform.adapters.peers.flashinfer import FlashinferChain

    p, q, P, Q, d, lens, u = single_draft_case(32, seed=5)
    chain = FlashinferChain(StandInSampling(), None, "stand-in", device="cpu")
    tokens, _, emitted = chain.staged(P, Q, d, u)()
    assert tuple(tokens.shape) == (32, 2) and int(emitted.max()) <= 1
