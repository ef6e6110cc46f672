"""The requests of a sequence protocol's groups, and which groups each test covers.

Request i of a group takes prompt ``prompts[group.prompts[i % n]]``, sampling
``sampling[i % m]`` (unset fields: the engine's), length ``max_tokens[i % l]`` and seed
``seeds.offset + seed_offset + i`` (none for a greedy request): all fixed by the
protocol, so the runner, the evaluator and a reviewer derive the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specconform.adapters.sequence import RequestSpec
from specconform.runner import sequence_checks as sc
from specconform.util.errors import UsageError

SEED_LIMIT = 2**63  # the bundled engine's seed domain [0, 2**63)


def resolve_prompts(protocol, engine) -> list[tuple[int, ...]]:
    """The protocol's prompts as token tuples ("default": the engine's prompt)."""
    out = []
    for i, prompt in enumerate(protocol.prompts):
        tokens = list(engine.prompt) if prompt == "default" else list(prompt)
        bad = [t for t in tokens if not 0 <= t < engine.vocab_size]
        if not tokens or bad:
            raise UsageError(
                f"prompts[{i}]: token {bad[0] if bad else '(none)'} outside the engine's "
                f"vocabulary [0, {engine.vocab_size})"
            )
        out.append(tuple(int(t) for t in tokens))
    return out


def build_requests(protocol, group, prompts: Sequence[tuple[int, ...]]) -> list[RequestSpec]:
    """Request i: prompt, sampling and length cycle over the group's lists; seed
    seeds.offset + seed_offset + i (none for a greedy request)."""
    eng = protocol.engine
    lengths = group.max_tokens or [eng.max_tokens]
    specs = []
    for i in range(protocol.group_requests(group)):
        cfg = group.sampling[i % len(group.sampling)]
        temperature = eng.temperature if cfg.temperature is None else cfg.temperature
        seed = protocol.seeds.offset + group.seed_offset + i
        if seed >= SEED_LIMIT:
            raise UsageError(
                f"group {group.name!r}: seed {seed} of request {i} leaves the seed domain "
                "[0, 2**63): lower --offset"
            )
        specs.append(
            RequestSpec(
                prompt=prompts[group.prompts[i % len(group.prompts)]],
                seed=None if float(np.float32(temperature)) == 0.0 else seed,
                temperature=float(temperature),
                top_k=int(eng.top_k if cfg.top_k is None else cfg.top_k),
                top_p=float(eng.top_p if cfg.top_p is None else cfg.top_p),
                max_tokens=int(lengths[i % len(lengths)]),
                stop_token_ids=tuple(group.stop_token_ids),
                ignore_eos=bool(group.ignore_eos),
            )
        )
    return specs


def covered_groups(protocol, test) -> list:
    """The groups a test covers: its own list, or every group its type applies to."""
    by_name = {g.name: g for g in protocol.groups}
    if test.groups:
        return [by_name[n] for n in test.groups]
    if test.type in ("trace", "acceptance_all", "greedy_equality"):
        return [g for g in protocol.groups if g.mode != "nospec"]
    return list(protocol.groups)


def greedy_plan(protocol, specs: dict[str, list[RequestSpec]]) -> dict[str, dict]:
    """For each greedy_equality test: {group: [(i, j), ...]} pairing every greedy request
    i of a tested group with request j of the `against` group. Refused before anything
    runs when a tested group has no greedy request or a request has no partner."""
    plans: dict[str, dict] = {}
    for test in protocol.tests:
        if test.type != "greedy_equality":
            continue
        plan = {}
        for group in covered_groups(protocol, test):
            pairs = sc.greedy_pairs(specs[group.name], specs[test.against])
            if not pairs:
                raise UsageError(
                    f"test {test.name!r}: group {group.name!r} has no greedy request to compare"
                )
            for i, j in pairs:
                if j is None:
                    r = specs[group.name][i]
                    raise UsageError(
                        f"test {test.name!r}: greedy request {i} of {group.name!r} (max_tokens "
                        f"{r.max_tokens}) has no greedy request with the same prompt, "
                        f"max_tokens and stop rule in {test.against!r}"
                    )
            plan[group.name] = pairs
        plans[test.name] = plan
    return plans
