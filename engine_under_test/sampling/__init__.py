"""The sampling core shared by every decoding mode of the engine under test.

p is always the target law (full depth R), q the draft law (draft depth d); K is the
number of drafts per round.

Vocabulary (docs/contracts.md):

- **round**: one speculative step for a batch: K drafts at depth d, one verification
  at full depth R over the K+1 positions.
- **accepted** token: a draft x_j that passed ``u_j * q(x_j) < p(x_j)``.
- **stop point**: the first position j whose draft is not a valid accept (rejected,
  or j >= the row's draft length).
- **correction** (recovered) token: drawn at a rejected stop point from
  ``max(p - q, 0)``.
- **bonus** token: drawn from p at position L = draft_len when every draft was
  accepted (L = 0, "effective K = 0", samples from p at position 0).
- **committed** tokens: the accepted drafts followed by the correction or bonus token
  (between 1 and L+1 tokens per round).

Modules: `probabilities` (the law from logits: serial reference and batched path),
`categorical` (inverse-CDF draw from given uniforms), `accept` (the rejection-sampling
step, and `sample_target`, the same step with no drafts: every draw from the target
law goes through it), `rng` (request-owned Philox uniforms), `triton_kernels` (CUDA-only fused
kernels, imported lazily).
"""

from engine_under_test.sampling._dispatch import set_triton_enabled
from engine_under_test.sampling.accept import (
    INVALID_NAMES,
    KERNEL_MUTANTS,
    UNCLASSIFIED,
    AcceptResult,
    sample_target,
    speculative_accept,
)
from engine_under_test.sampling.categorical import categorical
from engine_under_test.sampling.probabilities import Sampler, batched_probabilities
from engine_under_test.sampling.rng import (
    ORIGIN_COLUMNS,
    RngRegistry,
    philox_origins,
    philox_uniforms,
)

__all__ = [
    "INVALID_NAMES",
    "ORIGIN_COLUMNS",
    "KERNEL_MUTANTS",
    "UNCLASSIFIED",
    "AcceptResult",
    "RngRegistry",
    "Sampler",
    "batched_probabilities",
    "categorical",
    "philox_origins",
    "philox_uniforms",
    "sample_target",
    "set_triton_enabled",
    "speculative_accept",
]
