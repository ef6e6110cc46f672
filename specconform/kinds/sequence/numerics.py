"""The numerics model of a sequence protocol's deterministic checks (issue 32, part 1),
read from the protocol's canonical JSON: the runner uses it to set tolerances and to
classify near-ties, and the evaluator (``verify`` too) recomputes from the protocol alone
what the runner was allowed: the derived tolerance of a ``tolerance: model`` test, and
the near-tie limit of a token comparison.

Temperature: the model's scale is ``logit_scale / T`` (a logit divided by T carries its
error divided by T too, but the softmax sees |logit / T|). One tolerance per test, at the
smallest positive temperature of the requests it covers: the loosest bound any of its
comparisons is entitled to, so no correct comparison of the test exceeds it. Greedy
requests (T = 0) compare one-hot laws, exact or of another support, and take the scale
at T = 1.

Torch-free: numpy/scipy through specconform.stats.numerics.
"""

from __future__ import annotations

from specconform.protocol.schema_sequence import TOKEN_TYPES as SCHEMA_TOKEN_TYPES
from specconform.protocol.schema_sequence import limits_near_ties
from specconform.stats.numerics import (
    NumericsModel,
    filter_near_tie_rate,
    law_tolerance,
    near_tie_limit,
    token_near_tie_rate,
)

# The group modes a deterministic check reads when it names no group (the runner's
# sequence_requests.covered_groups): trace, acceptance and greedy equality need drafts.
SPECULATIVE_ONLY = ("trace", "acceptance_all", "greedy_equality")
# Token comparisons that count near-ties under a numerics model (runner/near_ties.py);
# stated with the schema, which charges their limits' levels to the verdict's reserve.
TOKEN_TYPES = SCHEMA_TOKEN_TYPES


def numerics_block(protocol: dict) -> dict | None:
    return protocol.get("numerics")


def covered_group_names(protocol: dict, spec: dict) -> list[str]:
    if spec.get("groups"):
        return list(spec["groups"])
    groups = protocol["groups"]
    if spec["type"] in SPECULATIVE_ONLY:
        return [g["name"] for g in groups if g["mode"] != "nospec"]
    return [g["name"] for g in groups]


def smallest_temperature(protocol: dict, group_names: list[str]) -> float:
    """The smallest positive temperature among the covered groups' sampling cycles
    (unset: the engine's); 1.0 when every covered request is greedy."""
    default = float((protocol.get("engine") or {}).get("temperature", 1.0))
    temps = []
    for g in protocol["groups"]:
        if g["name"] not in group_names:
            continue
        for cfg in g.get("sampling") or [{}]:
            t = cfg.get("temperature")
            temps.append(default if t is None else float(t))
    positive = [t for t in temps if t > 0]
    return min(positive) if positive else 1.0


def model_at(block: dict, temperature: float) -> NumericsModel:
    """The stated model at one temperature (scale = logit_scale / T)."""
    t = temperature if temperature > 0 else 1.0
    return NumericsModel(
        dtype=block["dtype"],
        reduction_length=int(block["reduction_length"]),
        kernels=int(block["kernels"]),
        scale=float(block["logit_scale"]) / t,
        growth=block.get("growth", "random"),
    )


def model_json(model: NumericsModel) -> dict:
    """What checks.json records of the model a check used (law_bound derived)."""
    return {
        "dtype": model.dtype,
        "reduction_length": model.reduction_length,
        "kernels": model.kernels,
        "scale": model.scale,
        "growth": model.growth,
        "logit_bound": model.logit_bound,
        "law_bound": model.law_bound,
        "ratio_bound": model.ratio_bound,
    }


def check_model(protocol: dict, spec: dict) -> NumericsModel | None:
    """The model a check of ``spec`` is held to (at its covered groups' smallest
    temperature), or None when the protocol states no numerics."""
    block = numerics_block(protocol)
    if block is None:
        return None
    return model_at(block, smallest_temperature(protocol, covered_group_names(protocol, spec)))


def check_tolerance(protocol: dict, spec: dict) -> float | None:
    """A law comparison's tolerance: the stated number, or for ``tolerance: model`` the
    model's law bound (check_model). None: the test states none."""
    tol = spec.get("tolerance")
    if tol == "model":
        model = check_model(protocol, spec)
        if model is None:
            raise ValueError(f"test {spec['name']!r}: tolerance: model without a numerics block")
        return law_tolerance(model)
    return None if tol is None else float(tol)


def counts_near_ties(spec: dict) -> bool:
    """Whether the test ``spec`` counts near-ties (the schema's limits_near_ties)."""
    return limits_near_ties(spec["type"], spec.get("tolerance"))


def tie_limit(protocol: dict, spec: dict, decisions: int) -> int | None:
    """The most near-ties a check of ``spec`` may show over ``decisions`` (tokens of a
    token comparison; filtered law comparisons of a law check) before the model is
    refuted at numerics.alpha; None without a numerics block."""
    block = numerics_block(protocol)
    model = check_model(protocol, spec)
    if block is None or model is None:
        return None
    per = token_near_tie_rate if spec["type"] in TOKEN_TYPES else filter_near_tie_rate
    rate = per(model, int(block["boundaries"]))
    return near_tie_limit(int(decisions), rate, float(block["alpha"]))
