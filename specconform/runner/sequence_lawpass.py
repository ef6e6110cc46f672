"""The law pass of a sequence run: the reference law of every committed token's prefix,
reduced to its tokens.csv row, one request at a time.

Two kinds of work alternate per request: the engine's (its teacher-forced or serial
laws, the teacher_forcing comparisons, the rare filter-margin replays) and numpy's
(`token_rows`: about fifteen float64 passes over the vocabulary per token, on chunks of
rows at once, 0.7 ms a token at V = 49,152 on one core). The engine's work stays on this
thread (adapters are not thread-safe); the numpy reduction of up to
``reduction_workers()`` requests runs in a thread pool (numpy releases the GIL on
whole-array work) while the engine computes the next request's laws. Results are taken
in request order, so tokens.csv is byte for byte what one thread writes (same functions
on the same inputs). On the H200 the serial reduction took 229 s of sequence.yaml's 396
(113,866 tokens; docs/gpu-runs.md).
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.kinds.sequence.numerics import model_at
from specconform.runner import sequence_checks as sc
from specconform.runner.sequence_laws import (
    RequestLaws,
    drafted_steps,
    incremental_laws,
    support_margins,
    teacher_forced_laws,
    token_rows,
)
from specconform.runner.sequence_requests import covered_groups

# Requests whose laws wait in the pool at most: each holds its [T, V] p and q (about
# 150 MB at T = 384, V = 49,152), so the bound is also the pass's memory bound.
MAX_WORKERS = 8


def reduction_workers() -> int:
    """Threads for the numpy reduction: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


@dataclass
class _Pending:
    """One request whose rows are being reduced in the pool."""

    rows: Future  # -> list[tuple], token_rows' rows
    request: RequestSpec
    record: SequenceRecord
    laws: RequestLaws
    depth: int | None


def flat_rows(protocol, groups, records) -> list[tuple[str, int, int]]:
    names = {g.name for g in groups}
    return [
        (g.name, i, t)
        for g in protocol.groups
        if g.name in names
        for i, rec in enumerate(records[g.name])
        for t in range(len(rec.tokens))
    ]


def law_pass(engine, protocol, specs, records, tf_tests, tallies, *, teacher, progress):
    """tokens.csv rows of every request; teacher-forced laws when `teacher`, with the
    teacher_forcing comparisons at their sampled steps (into `tallies`)."""
    wanted: dict[tuple[str, int], list[tuple[str, int]]] = {}  # (group, request) -> tests
    for test in tf_tests:
        flat = flat_rows(protocol, covered_groups(protocol, test), records)
        for k in sc.sample_of(test, len(flat), protocol.pit_seed):
            g, i, t = flat[k]
            wanted.setdefault((g, i), []).append((test.name, t))
    has_q = engine.info.capabilities.draft_law
    block = None if protocol.numerics is None else protocol.numerics.model_dump(mode="json")

    def model_for(temperature: float):
        return None if block is None else model_at(block, temperature)

    rows: list[tuple] = []
    pending: deque[_Pending] = deque()
    workers = reduction_workers()

    def finish(job: _Pending) -> None:
        """The job's rows with their filter margins (engine work: this thread)."""
        mine = job.rows.result()
        margins = support_margins(
            engine, job.request, job.record.tokens, mine, job.laws, job.depth, model_for
        )
        rows.extend(row + (m,) for row, m in zip(mine, margins, strict=True))

    total = sum(len(r) for r in records.values())
    label = "reference (teacher forced)" if teacher else "reference"
    with (
        progress(label, total) as bar,
        ThreadPoolExecutor(workers, thread_name_prefix="token-rows") as pool,
    ):
        for group in protocol.groups:
            depth = group.draft_loops
            for i, (req, rec) in enumerate(
                zip(specs[group.name], records[group.name], strict=True)
            ):
                laws = teacher_forced_laws(engine, req, rec.tokens, depth) if teacher else None
                if laws is None:
                    laws = incremental_laws(engine, req, rec.tokens, depth, drafted_steps(rec))
                for name, t in wanted.get((group.name, i), []) if teacher else []:
                    prefix = list(req.prompt) + list(rec.tokens[:t])
                    at = {"group": group.name, "request": i, "step": t}
                    q_engine = laws.q_at(t) if has_q else None
                    sc.compare_step(
                        tallies[name], req, prefix, at, laws.p[t], q_engine,
                        engine.target_law_for, engine.draft_law_for, depth,
                    )  # fmt: skip
                top_p = 0.0 < req.top_p < 1.0 and not req.greedy
                job = pool.submit(token_rows, group.name, i, rec, laws, top_p=top_p)
                pending.append(_Pending(job, req, rec, laws, depth if has_q else None))
                while len(pending) > workers:  # in request order: the same bytes
                    finish(pending.popleft())
                    bar.advance(1)
        while pending:
            finish(pending.popleft())
            bar.advance(1)
    return rows
