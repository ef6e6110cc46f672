"""Sequence runner: long generations of many requests, every committed token reduced
to its PIT columns against the serial reference law, and the deterministic checks.

Per group (one engine configuration), in protocol order: every request in one
`run_requests` call with at most ``max_num_seqs`` running (continuous batching), then
the group's ``trace`` checks (a traced rerun of a sample of its requests) and
``isolation`` checks (each sampled request rerun alone). Then, one request at a time,
the reference laws of every prefix (`runner.sequence_laws`), the ``teacher_forcing``
comparisons, the ``oracle`` check and ``greedy_equality``. The raw files follow
`specconform.kinds.sequence.raw` exactly; two runs with the same inputs write the same
bytes (the engine is seeded per request and every sample is pre-registered).
"""

from __future__ import annotations

import io
import json
import time

import pandas as pd

from specconform.adapters.sequence import SequenceRecord
from specconform.kinds.sequence.numerics import model_at
from specconform.kinds.sequence.raw import (
    CHECKS,
    CROSS_COLUMNS,
    FILTER_COLUMNS,
    MECH_COLUMNS,
    REQUEST_COLUMNS,
    REQUESTS,
    TOKEN_COLUMNS,
    TOKENS,
)
from specconform.runner import sequence_checks as sc
from specconform.runner import sequence_streams as ss
from specconform.runner.near_ties import classify
from specconform.runner.sequence_lawpass import flat_rows, law_pass
from specconform.runner.sequence_requests import (
    build_requests,
    covered_groups,
    greedy_plan,
    resolve_prompts,
)
from specconform.runner.sequence_stops import stop_check
from specconform.util.errors import UsageError
from specconform.util.progress import notice, timing

# --- generation -----------------------------------------------------------------------


class _Advance:
    """The engine's progress(done, total) as increments of one progress bar."""

    def __init__(self, bar):
        self.bar, self.done = bar, 0

    def __call__(self, done: int, total: int) -> None:
        self.bar.advance(done - self.done)
        self.done = done


def _generate(engine, group, specs, slots, bar, *, trace=False) -> list[SequenceRecord]:
    return engine.run_requests(group, specs, slots, trace, _Advance(bar) if bar else None)


def group_checks(engine, protocol, group, specs, records, tallies, progress) -> None:
    """The trace and isolation checks of the tests that cover `group`."""
    caps = engine.info.capabilities
    for test in protocol.tests:
        if group.name not in {g.name for g in covered_groups(protocol, test)}:
            continue
        if test.type == "trace" and caps.trace and tallies[test.name] is not None:
            picked = sc.spread(len(specs), test.sample or sc.DEFAULT_SAMPLE["trace"])
            sub = [specs[i] for i in picked]
            with progress(f"trace {group.name}", len(sub)) as bar:
                traced = _generate(engine, group, sub, group.max_num_seqs, bar, trace=True)
            if any(r.traces is None for r in traced):
                tallies[test.name] = None  # the engine gave no traces: not applicable
                continue
            sc.trace_check(
                tallies[test.name],
                sub,
                traced,
                [{"group": group.name, "request": i} for i in picked],
                group.draft_loops,
                engine.target_law_for,
                engine.draft_law_for,
            )
        elif test.type == "streams" and caps.trace and tallies[test.name] is not None:
            tally = tallies[test.name]
            if not ss.streams_group(engine, group, specs, tally, test.sample, _generate, progress):
                tallies[test.name] = None  # the engine gave no draws: not applicable
        elif test.type == "isolation":
            picked = sc.spread(len(specs), test.sample or sc.DEFAULT_SAMPLE["isolation"])
            with progress(f"isolation {group.name}", len(picked)) as bar:
                for i in picked:
                    solo = _generate(engine, group, [specs[i]], 1, None)[0]
                    _compare_tokens(
                        tallies[test.name],
                        protocol,
                        specs[i],
                        records[i],
                        solo,
                        {"group": group.name, "request": i},
                        engine,
                        group.draft_loops,
                    )
                    bar.advance(1)


def _compare_tokens(tally, protocol, req, a, b, where, engine, draft_depth) -> None:
    """isolation / greedy_equality: exact token equality, or, under the protocol's
    numerics model, equality with near-ties counted apart (runner/near_ties.py)."""
    if tally.near_ties is None:
        sc.add_token_comparison(tally, a.tokens, b.tokens, where)
        return
    model = model_at(protocol.numerics.model_dump(mode="json"), req.temperature)
    div = classify(req, a, b, model, engine, draft_depth)
    example = {**where, "first_divergent_step": div.step}
    if div.step is not None:
        d = sc.first_divergence(a.tokens, b.tokens)
        example["tokens"] = [
            int(a.tokens[d]) if d is not None and d < len(a.tokens) else None,
            int(b.tokens[d]) if d is not None and d < len(b.tokens) else None,
        ]
    tally.add_divergence(div, example)


# --- laws and rows: runner/sequence_lawpass.py -------------------------------------


def teacher_forcing_summary(name: str, tally) -> str:
    """One line on a teacher_forcing check: comparisons, mismatches, how many differ in
    support, the largest |Δp| against the tolerance."""
    worst = "none" if tally.max_abs_diff is None else f"{tally.max_abs_diff:.3g}"
    tolerance = 0.0 if tally.tolerance is None else tally.tolerance  # None: exact
    return (
        f"{name}: {tally.checked} comparisons, {tally.mismatches} mismatches "
        f"({tally.support_differences} in support), max |dp| {worst} "
        f"(tolerance {tolerance:g})"
    )


# --- the run --------------------------------------------------------------------------


def collect(loaded, *, mutant, progress, log, context) -> dict[str, bytes]:
    from specconform.adapters.engine import load_engine

    protocol = loaded.model
    engine = load_engine(protocol.engine, mutant=mutant, log=log)
    try:
        return _collect(protocol, engine, progress=progress, log=log, context=context)
    finally:
        engine.close()


def _collect(protocol, engine, *, progress, log, context) -> dict[str, bytes]:
    caps = engine.info.capabilities
    if not caps.sequence:
        raise UsageError(
            f"engine adapter {engine.name}: has no run_requests()/target_law_for(); "
            "sequence protocols need them (docs/adapters.md)"
        )
    engine.check_groups(protocol.groups)
    log(f"engine adapter: {engine.name} ({engine.info.name} {engine.info.version})")
    prompts = resolve_prompts(protocol, engine)
    specs = {g.name: build_requests(protocol, g, prompts) for g in protocol.groups}
    pairs = greedy_plan(protocol, specs)
    if context.outputs.reserve_seeds is not None:
        context.outputs.reserve_seeds()  # the seed ledger (runner.reserve): inputs are good
    tallies: dict[str, sc.CheckTally | None] = {}
    canonical = protocol.model_dump(mode="json")  # what the evaluator reads (numerics)
    for test in protocol.tests:
        if test.type in sc.DEFAULT_SAMPLE or test.type in ("greedy_equality", "stops"):
            tallies[test.name] = sc.new_tally(test, canonical)
        elif test.type == "streams":
            tallies[test.name] = ss.StreamsTally(test.type, None)

    records: dict[str, list[SequenceRecord]] = {}
    for group in protocol.groups:
        t0 = time.perf_counter()
        with progress(f"generate {group.name}", len(specs[group.name])) as bar:
            records[group.name] = _generate(
                engine, group, specs[group.name], group.max_num_seqs, bar
            )
        n_tok = sum(len(r.tokens) for r in records[group.name])
        reasons = pd.Series([r.finish_reason for r in records[group.name]]).value_counts()
        log(
            f"group {group.name}: {len(specs[group.name])} requests, {n_tok} tokens "
            f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})"
        )
        timing(f"generate {group.name}: {n_tok} tokens in {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        group_checks(
            engine, protocol, group, specs[group.name], records[group.name], tallies, progress
        )
        timing(f"trace/isolation checks {group.name} in {time.perf_counter() - t0:.1f}s")

    tf_tests = [t for t in protocol.tests if t.type == "teacher_forcing"]
    teacher = bool(tf_tests) and caps.sequence_laws
    t0 = time.perf_counter()
    rows = law_pass(
        engine, protocol, specs, records, tf_tests, tallies, teacher=teacher, progress=progress
    )
    for test in tf_tests if teacher else []:
        timing(teacher_forcing_summary(test.name, tallies[test.name]))
    if teacher and any(tallies[t.name].mismatches for t in tf_tests):  # type: ignore[union-attr]
        # The sample found teacher forcing unequal to the serial replay: no law of it is
        # trusted; every row comes from the incremental path (the check records FAIL).
        # Said on stderr too, whatever the verbosity: the replay can take many minutes.
        found = "; ".join(teacher_forcing_summary(t.name, tallies[t.name]) for t in tf_tests)
        message = (
            f"teacher forcing differs from the serial replay ({found}): every law is "
            f"recomputed serially, {len(rows)} prefixes of one forward each"
        )
        log(message)
        notice(f"warning: {message}")
        rows = law_pass(
            engine, protocol, specs, records, [], tallies, teacher=False, progress=progress
        )
    timing(f"reference laws of {len(rows)} tokens in {time.perf_counter() - t0:.1f}s")

    t0 = time.perf_counter()
    _oracle_and_greedy(engine, protocol, specs, records, pairs, tallies)
    timing(f"oracle and greedy checks in {time.perf_counter() - t0:.1f}s")
    checks = _check_records(protocol, caps, tallies, canonical)
    context.outputs.run_fields.update(
        {
            "engine_adapter": engine.info.to_json(),
            "seed_ranges": {
                g.name: [
                    protocol.seeds.offset + g.seed_offset,
                    protocol.seeds.offset + g.seed_offset + protocol.group_requests(g),
                ]
                for g in protocol.groups
            },
        }
    )
    return {
        REQUESTS: _requests_csv(protocol, specs, records),
        TOKENS: _tokens_csv(rows),
        CHECKS: json.dumps(checks, sort_keys=True, separators=(",", ":")).encode(),
    }


def _oracle_and_greedy(engine, protocol, specs, records, pairs, tallies) -> None:
    configs = sorted({(r.temperature, r.top_k, r.top_p) for group in specs.values() for r in group})
    for test in protocol.tests:
        tally = tallies.get(test.name)
        if test.type == "oracle" and engine.info.capabilities.logits and tally is not None:
            flat = flat_rows(protocol, covered_groups(protocol, test), records)
            prefixes = []
            for k in sc.sample_of(test, len(flat), protocol.pit_seed):
                g, i, t = flat[k]
                req = specs[g][i]
                prefix = list(req.prompt) + list(records[g][i].tokens[:t])
                prefixes.append(({"group": g, "request": i, "step": t}, prefix, req))
            sc.oracle_check(tally, prefixes, configs, engine.target_law_for, engine.target_logits)
        elif test.type == "stops" and tally is not None:
            stop_check(
                tally,
                [
                    ({"group": g.name, "request": i}, specs[g.name][i], rec)
                    for g in covered_groups(protocol, test)
                    for i, rec in enumerate(records[g.name])
                ],
            )
        elif test.type == "greedy_equality" and tally is not None:
            for group, plan in pairs[test.name].items():
                for i, j in plan:
                    _compare_tokens(
                        tally,
                        protocol,
                        specs[group][i],
                        records[group][i],
                        records[test.against][j],
                        {"group": group, "request": i, "against_request": j},
                        engine,
                        None,
                    )


def _check_records(protocol, caps, tallies, canonical: dict) -> dict[str, dict]:
    """checks.json: one record per deterministic test; "not applicable" says why."""
    why = {
        "oracle": None if caps.logits else "the adapter has no target_logits()",
        "teacher_forcing": None if caps.sequence_laws else "the adapter has no sequence_laws()",
        "trace": None if caps.trace else "the engine gives no per-round laws (trace)",
        "streams": None if caps.trace else "the engine gives no per-round traces (trace)",
    }
    out = {}
    for test in protocol.tests:
        if test.name not in tallies:
            continue
        tally = tallies[test.name]
        reason = why.get(test.type)
        if reason is None and tally is None:
            reason = "the engine returned no traces for run_requests(trace=True)"
            if test.type == "streams":  # traces, but without their random draws
                reason = "the engine reports no random draws in its traces"
        if reason is not None:
            out[test.name] = sc.not_applicable(test.type, reason, sc.tolerance_of(test, canonical))
        else:
            assert tally is not None
            out[test.name] = tally.record()
    return out


def _requests_csv(protocol, specs, records) -> bytes:
    rows = []
    for group in sorted(protocol.groups, key=lambda g: g.name):
        for i, (req, rec) in enumerate(zip(specs[group.name], records[group.name], strict=True)):
            rows.append(
                (
                    group.name,
                    i,
                    group.prompts[i % len(group.prompts)],
                    -1 if req.seed is None else req.seed,
                    req.temperature,
                    req.top_k,
                    req.top_p,
                    req.max_tokens,
                    " ".join(str(t) for t in req.stop_token_ids),
                    len(rec.tokens),
                    rec.finish_reason,
                )
            )
    return _csv(pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)))


def _tokens_csv(rows: list[tuple]) -> bytes:
    columns = TOKEN_COLUMNS + MECH_COLUMNS + CROSS_COLUMNS + FILTER_COLUMNS
    frame = pd.DataFrame(rows, columns=list(columns))
    frame = frame.sort_values(["group", "request", "step"], kind="stable")
    return _csv(frame)


def _csv(frame: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode()
