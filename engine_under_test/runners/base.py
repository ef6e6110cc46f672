"""Host side shared by every runner: slots, admission, prefill, commits, fatal cleanup.

A runner owns the device state of ``max_num_seqs`` slots, a per-depth KV cache (grown
lazily: slots to the next power of two in use, positions to what admitted requests
need), the request-owned RNG registry and the host records. Subclasses implement
``step()``: one scheduling iteration (admit + prefill, one decode round, collect).

Contract 3 (numerical errors) lives in ``apply_round`` and ``apply_prefill``: the host
applies exactly what the device did. If the device flagged the round (or prefill batch)
as failed (an invalid law at a live row's stop point), every live request of the round
is finished with "error" before any token of the round is looked at (so before EOS
truncation) and nothing of the round is committed; the device did not advance those
slots either. Rows that were not live (empty slots, requests that had finished, an
aborted request still in flight) are never looked at, whatever their error flags say.
Each failure is recorded in ``failures`` (a ``FailedRound``: which requests, which of
their rounds, what was invalid), which ``LLM.generate`` reports to its caller.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import torch

from ..model import KVCache, LoopedLM
from ..sampling import INVALID_NAMES, RngRegistry
from .cuda_graphs import GraphedRound
from .law_trace import RoundTraces
from .mutant_hooks import MutantHooks
from .outputs import FailedRound, RequestError, RoundStat
from .prefill import PrefillForward, PrefillOutputs, prefill
from .state import HostTransfer, Request, SlotState, bucket_size, cache_length


class RunnerBase:
    mode = "base"
    lookahead = 1  # KV positions a round may write past the last committed token

    def __init__(
        self,
        model: LoopedLM,
        *,
        device: torch.device,
        max_num_seqs: int,
        max_model_len: int,
        num_draws: int,
        hooks: MutantHooks,
    ):
        self.model = model
        self.device = torch.device(device)
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.hooks = hooks
        self.state = SlotState(max_num_seqs, self.device)
        self.rng = RngRegistry(num_draws, max_num_seqs, self.device)
        self.cache: KVCache | None = None
        self.cache_version = 0
        self.slots: list[Request | None] = [None] * max_num_seqs
        self._free = list(range(max_num_seqs))
        self.waiting: deque[Request] = deque()
        self.transfer = HostTransfer(self.device)
        self.fault = None  # tests: fault(kind, logits) -> logits
        self.trace: list | None = None  # tests: collected rounds when a list
        self.law_trace = False  # generate(trace=True): rounds return their p and q
        self.failures: list[FailedRound] = []  # every failed prefill batch or round
        self.rounds_run = 0  # decode rounds collected
        self.prefills_run = 0  # prefill batches collected
        self.graphs: GraphedRound | None = None
        self.prefill_forward = PrefillForward(model, self.device, graphs=False)
        self._graph_key = None
        self.round_hints: dict = {}  # sampling_hints of the round being run (CPU only)
        self._finished_slots: list[tuple[int, bool]] = []  # (slot, seeded) to clear

    # ------------------------------------------------------------------ CUDA Graphs
    def enable_cuda_graphs(self, round_fn) -> None:
        """Capture ``round_fn(*key) -> tuple of tensors`` once per key and replay it
        (CUDA only; a no-op elsewhere). ``round_fn`` must read its inputs from the
        persistent slot state, RNG registry and KV cache, and never sync the host."""
        if self.device.type == "cuda":
            self.graphs = GraphedRound(round_fn, self._mutable_state, self.device)
            self.prefill_forward = PrefillForward(self.model, self.device, graphs=True)

    def capture_at_first_use(self) -> None:
        """Capture every round and prefill shape at its first use instead of its third
        (benchmarks: their untimed warm-up then captures what the timed runs replay)."""
        for graphed in (self.graphs, self.prefill_forward.graphs):
            if graphed is not None:
                graphed.eager_uses = 0

    def _mutable_state(self) -> list[torch.Tensor]:
        """Tensors a round may mutate; the capture's warm-up restores them."""
        s = self.state
        return [
            s.next_token,
            s.next_pos,
            s.budget,
            s.live,
            self.rng.round,
            *self.hooks.device_state(),
        ]

    def release(self) -> None:
        """Drop the KV cache and every captured graph (with its memory pool). The graphs
        hold the runner through their round function, a reference cycle, so without
        this the memory would wait for Python's cyclic collector. The runner stays
        usable: the next admission reallocates the cache and recaptures."""
        if self.has_work():
            raise RuntimeError("release() with requests still waiting or in flight")
        if self.graphs is not None:
            self.graphs.invalidate()
        self.prefill_forward.release()
        self.cache = None
        self.cache_version += 1

    def run_round(self, round_fn, B: int, *key) -> tuple:
        """Run one round for slots 0..B-1: graph replay on CUDA (unless a test fault is
        injected, which the graph could not see), eager otherwise. ``round_fn(B, *key)``
        reads its sampling hints from ``self.round_hints`` (set here; {} on CUDA, so
        captured graphs never depend on them). Returns private copies of the graph's
        static outputs, ordered on the compute stream, so the next replay may overwrite
        them while a side-stream transfer still reads these (outputs that are None,
        e.g. the laws of an untraced round, stay None)."""
        self.round_hints = self.sampling_hints(self.slots[:B])
        key = (B, *key)
        if self.graphs is None or self.fault is not None:
            out = round_fn(*key)
        else:
            version = (self.cache_version, self.state.version)
            if version != self._graph_key:  # a reallocated tensor: captured graphs are stale
                self.graphs.invalidate()
                self._graph_key = version
            out = tuple(None if t is None else t.clone() for t in self.graphs(*key))
        self.hooks.after_round_submitted(self.state)
        return out

    # ------------------------------------------------------------------ capacity
    def max_len_needed(self, req: Request) -> int:
        return len(req.prompt) + req.params.max_tokens + self.lookahead

    def check_request(self, req: Request) -> None:
        need = self.max_len_needed(req)
        if need > self.max_model_len:
            raise ValueError(
                f"prompt ({len(req.prompt)}) + max_tokens ({req.params.max_tokens}) + "
                f"lookahead ({self.lookahead}) = {need} exceeds max_model_len "
                f"{self.max_model_len}"
            )
        V = self.model.cfg.vocab_size
        # min/max in C: a per-token generator cost 21 us a request (5,000 a batch).
        if not req.prompt or min(req.prompt) < 0 or max(req.prompt) >= V:
            raise ValueError(f"prompt must be a non-empty list of ids in [0, {V})")

    def _ensure_cache(self, slots_needed: int, len_needed: int) -> None:
        slots = bucket_size(slots_needed, self.max_num_seqs)
        length = cache_length(len_needed)
        c = self.cache
        if c is None:
            self.cache = self.model.new_cache(slots, length)
        elif slots > c.num_slots or length > c.max_len:
            grown = self.model.new_cache(max(slots, c.num_slots), max(length, c.max_len))
            n, L = c.num_slots, c.max_len
            grown.k[:, :, :n, :, :L] = c.k
            grown.v[:, :, :n, :, :L] = c.v
            self.cache = grown
        else:
            return
        self.cache_version += 1

    # ------------------------------------------------------------------ requests
    def add(self, req: Request) -> None:
        self.check_request(req)
        self.waiting.append(req)

    def live_requests(self) -> list[Request]:
        """Requests a new round could still serve (see ``Request.budget_bound``)."""
        return [r for r in self.slots if r is not None and r.budget_bound > 0]

    def has_work(self) -> bool:
        return bool(self.waiting) or any(r is not None for r in self.slots)

    def admit(self) -> list[Request]:
        """Move waiting requests into the lowest free slots and write their state."""
        admitted = []
        while self.waiting and self._free:
            req = self.waiting.popleft()
            req.slot = heapq.heappop(self._free)
            self.slots[req.slot] = req
            admitted.append(req)
        if not admitted:
            return admitted
        live = [r for r in self.slots if r is not None]
        self._ensure_cache(max(r.slot for r in live) + 1, max(self.max_len_needed(r) for r in live))
        self.state.set_params([r.slot for r in admitted], admitted)
        seeded = [r for r in admitted if r.seed is not None]
        self.rng.bind_many([r.slot for r in seeded], [r.seed for r in seeded])
        return admitted

    @property
    def failed_rounds(self) -> int:
        """Failed prefill batches and decode rounds so far (``failures`` has them)."""
        return len(self.failures)

    def run_prefill(self, admitted: list[Request]) -> PrefillOutputs:
        out = prefill(
            self.cache,
            self.state,
            self.rng,
            admitted,
            self.hooks,
            self.prefill_forward,
            self.sampling_hints(admitted),
            self.fault,
        )
        self.hooks.after_prefill(self.state, admitted)
        return out

    def finish(self, req: Request, reason: str, *, defer: bool = False) -> None:
        """Finish a request and free its slot (device state cleared, generator released).

        defer=True queues the slot's device writes for ``flush_finished``, so a commit
        pass that finishes thousands of requests issues one batched clear instead of
        thousands of small ones. The slot is not free for admission until then."""
        if req.output.finish_reason is None:
            req.output.finish_reason = reason
        if req.slot >= 0 and self.slots[req.slot] is req:
            self.slots[req.slot] = None
            self._finished_slots.append((req.slot, req.seed is not None))
            if not defer:
                self.flush_finished()

    def flush_finished(self) -> None:
        """Clear the device state of every slot finished since the last flush and
        return the slots to the free list."""
        if not self._finished_slots:
            return
        slots = [s for s, _ in self._finished_slots]
        self.state.clear(slots)
        self.rng.release_many([s for s, seeded in self._finished_slots if seeded])
        for s in slots:
            heapq.heappush(self._free, s)
        self._finished_slots = []

    def abort(self, req: Request) -> None:
        if req in self.waiting:
            self.waiting.remove(req)
            req.output.finish_reason = "abort"
            return
        self.finish(req, "abort")

    def bucket(self) -> int:
        used = [r.slot for r in self.live_requests()]
        return bucket_size(max(used) + 1, self.cache.num_slots) if used else 0

    def draft_width(self, rows: list[Request | None], K: int) -> int:
        """An upper bound of every live row's draft length this round (<= K).

        Uses the host's token counts: exact for sync runners, lagging (hence an upper
        bound, budgets only shrink) for the async one."""
        need = max((r.budget_bound - 1 for r in rows if r is not None), default=0)
        return max(0, min(K, need))

    def sampling_hints(self, requests: list[Request | None]) -> dict:
        """Host promises for ``batched_probabilities`` over these rows (CPU path only).

        Every row a round computes holds either a request the host has not finished
        (its parameters are known here) or a cleared slot (greedy), so the promise
        "every non-greedy row has 0 < top_k <= max_top_k" and "no top_p < 1" can be
        read off the host records. CUDA ignores hints (the fused kernel needs none), so
        none are given there and captured graphs do not depend on them."""
        if self.device.type == "cuda" or not self.hooks.allows_sampling_hints:
            return {}
        V = self.model.cfg.vocab_size
        ps = [r.params for r in requests if r is not None and not r.finished and r.seed is not None]
        ks = [p.top_k for p in ps]
        return {
            "max_top_k": max(ks, default=1) if all(0 < k < V for k in ks) else None,
            "any_top_p": any(p.top_p < 1.0 for p in ps),
        }

    def snapshot(self, B: int) -> list[Request | None]:
        """The request of each row 0..B-1 that a round submitted now may serve."""
        return [r if r is not None and r.budget_bound > 0 else None for r in self.slots[:B]]

    # ------------------------------------------------------------------ host commits
    def _fail(
        self,
        stage: str,
        index: int,
        rows: list[Request | None],
        live,
        invalid: np.ndarray,
        round_of,
    ) -> None:
        """Fatal cleanup: finish every live row with "error" and record the failure.
        round_of(req) is the request's round number of the failed round."""
        errors = []
        for b, req in enumerate(rows):
            if req is not None and not req.finished and live[b]:
                code = int(invalid[b])
                errors.append(
                    RequestError(
                        req.request_id, round_of(req), INVALID_NAMES.get(code) if code else None
                    )
                )
                self.finish(req, "error", defer=True)
        self.failures.append(FailedRound(stage, index, tuple(errors)))
        self.flush_finished()

    def apply_prefill(self, admitted: list[Request], host: dict[str, np.ndarray]) -> None:
        """Commit t1 of one collected prefill batch (or fail the batch, contract 3)."""
        self.prefills_run += 1
        if bool(host["t1_failed"][0]):
            self._fail(
                "prefill",
                self.prefills_run - 1,
                admitted,
                [True] * len(admitted),
                host["t1_invalid"],
                lambda req: 0,
            )
            return
        for req, tok in zip(admitted, host["t1"].tolist(), strict=True):
            if req.finished:
                continue
            if req.commit([tok], None):
                self.finish(req, req.output.finish_reason, defer=True)
        self.flush_finished()

    def apply_round(self, rows: list[Request | None], host: dict[str, np.ndarray]) -> None:
        """Commit one collected round (spec or nospec) to the host records."""
        self.rounds_run += 1
        if self.trace is not None:  # copies: pinned ring buffers get reused
            self.trace.append(
                (
                    [r.serial if r is not None else None for r in rows],
                    {k: v.copy() for k, v in host.items()},
                )
            )
        live = host["live"]
        if bool(host["failed"][0]):
            # Fatal cleanup, before any token or EOS of this round is looked at.
            self._fail(
                "decode",
                self.rounds_run - 1,
                rows,
                live,
                host["invalid"],
                lambda req: len(req.output.rounds) + 1,
            )
            return
        tokens, n_commit = host["tokens"], host["num_committed"]
        drafted, accepted = host["draft_lens"], host["num_accepted"]
        traces = RoundTraces.from_host(host)  # None unless the round was traced
        for b, req in enumerate(rows):
            if req is None or req.finished or not live[b]:
                continue  # stale row: whatever it holds is ignored
            n = int(n_commit[b])
            stat = RoundStat(int(drafted[b]), int(accepted[b]))
            if traces is not None:
                traces.record(b, req)
            if req.commit(tokens[b, :n].tolist(), stat, self.hooks.stop_slack):
                self.finish(req, req.output.finish_reason, defer=True)
        self.flush_finished()

    def begin_blocking_step(self) -> tuple[int, list[Request | None]]:
        """The synchronous runners' step prelude: admit and prefill new requests (t1
        read back at once), then size the batch and upload its rows' host state.
        Returns (B, rows); B == 0 means nothing to decode this step."""
        admitted = self.admit()
        if admitted:
            out = self.run_prefill(admitted)
            self.apply_prefill(admitted, self.transfer.wait(self.transfer.submit(out.host_view())))
        B = self.bucket()
        if B == 0:
            return 0, []
        rows = self.snapshot(B)
        self.state.host_sync_rows(B, rows)
        self.hooks.host_inputs(self.state, B, rows)
        return B, rows

    def step(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def drain(self) -> None:
        """Collect whatever is still in flight (async runners override)."""
