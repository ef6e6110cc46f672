"""Batch and round state shared by every runner.

Layout: a batch is always the slot prefix 0..B-1 (B a power-of-two bucket), so a round
reads its inputs and the KV cache through views, with static shapes that a CUDA Graph
can capture. ``SlotState`` holds the per-slot device tensors a round reads:

- ``next_token`` / ``next_pos``: the last committed token and its position, i.e. the
  next round's input. The async runner keeps them device-authoritative (updated by the
  round itself); the sync runners upload them from the host before each round.
- ``budget``: tokens the request may still commit (max_tokens - generated). A round
  drafts ``clamp(budget - 1, 0, K)`` tokens so it never commits past max_tokens.
- ``live``: the slot holds a request that may still commit (device view of liveness:
  the async runner clears it on a stop token, an exhausted budget or a failed round).
- sampling parameters (``temperature``, ``top_k``, ``top_p``, ``random``) and the stop
  ids (EOS unless ignore_eos, then stop_token_ids; -1 padded).

``Request`` is the host record of one request; ``HostTransfer`` moves a round's outputs
to the host (side stream into pinned memory on CUDA).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from ..params import SamplingParams
from .outputs import RequestOutput, RoundStat

# KV positions are allocated in multiples of LEN_ALIGN, and of SHORT_LEN_ALIGN while
# they fit in one LEN_ALIGN: a round's attention reads every allocated position of its
# rows (masked past the context), so fp32_t2's 19 positions in 64 made attention 24-27%
# of a 5,000-row batch's device time (H100, bench/fp32_batch_profile.py; at 24 positions
# the protocol's engine time was 1.55x lower, across two leases), while long contexts in
# full 64-key tiles, the attention kernel's block, ran c = 4 rounds 8% faster than in
# multiples of 8 (the same H100 side by side: docs/gpu-runs.md, 2026-12-07 late).
LEN_ALIGN = 64
SHORT_LEN_ALIGN = 8


def cache_length(len_needed: int) -> int:
    """KV positions to allocate for ``len_needed`` (see LEN_ALIGN)."""
    align = SHORT_LEN_ALIGN if len_needed <= LEN_ALIGN else LEN_ALIGN
    return -(-len_needed // align) * align


def bucket_size(n: int, capacity: int) -> int:
    """The batch bucket for ``n`` rows: the next power of two, at most ``capacity``."""
    b = 1
    while b < n:
        b *= 2
    return min(b, capacity)


@dataclass(eq=False)
class Request:
    """Host record of one request (identity, not id, is what rounds refer to)."""

    request_id: object
    prompt: list[int]
    params: SamplingParams
    seed: int | None  # None: greedy (acquires no generator)
    stop_ids: tuple[int, ...]  # EOS (unless ignore_eos) + stop_token_ids
    serial: int = field(default_factory=itertools.count().__next__)
    slot: int = -1
    output: RequestOutput = None  # type: ignore[assignment]
    inflight: int = 0  # submitted, not yet collected: prefill and rounds (async)

    def __post_init__(self) -> None:
        if self.output is None:
            self.output = RequestOutput(self.request_id, list(self.prompt), seed=self.seed)

    @property
    def finished(self) -> bool:
        return self.output.finish_reason is not None

    @property
    def generated(self) -> int:
        return len(self.output.token_ids)

    @property
    def budget_bound(self) -> int:
        """An upper bound of the tokens this request may still commit.

        Every submitted prefill or round that the request is still live for commits at
        least one token, so uncollected ones count as one each. <= 0 means the device
        has certainly stopped the request, whatever the host has read so far."""
        if self.finished:
            return 0
        return self.params.max_tokens - self.generated - self.inflight

    @property
    def next_pos(self) -> int:
        """Position of the last committed token (the next round's input)."""
        return len(self.prompt) + self.generated - 1

    def commit(self, tokens: list[int], stat: RoundStat | None, stop_slack: int = 0) -> bool:
        """Append committed tokens up to a stop token or max_tokens; True if finished.

        stop_slack: tokens of this round kept after a stop token; 0 except under the
        planted stop_commits_next (``MutantHooks.stop_slack``)."""
        if stat is not None:
            self.output.rounds.append(stat)
        out = self.output.token_ids
        for i, t in enumerate(tokens):
            out.append(int(t))
            if int(t) in self.stop_ids:
                self.output.finish_reason = "stop"
                room = self.params.max_tokens - len(out)
                out.extend(int(x) for x in tokens[i + 1 : i + 1 + min(stop_slack, room)])
                return True
            if len(out) >= self.params.max_tokens:
                self.output.finish_reason = "length"
                return True
        return False


class SlotState:
    """Per-slot device tensors (see the module docstring). S = max_num_seqs."""

    def __init__(self, num_slots: int, device: torch.device, stop_width: int = 4):
        S, dev = num_slots, device
        self.num_slots = S
        self.device = dev
        self.next_token = torch.zeros(S, dtype=torch.int64, device=dev)
        self.next_pos = torch.zeros(S, dtype=torch.int64, device=dev)
        self.budget = torch.zeros(S, dtype=torch.int64, device=dev)
        self.live = torch.zeros(S, dtype=torch.bool, device=dev)
        self.temperature = torch.zeros(S, dtype=torch.float32, device=dev)
        self.top_k = torch.zeros(S, dtype=torch.int64, device=dev)
        self.top_p = torch.ones(S, dtype=torch.float32, device=dev)
        self.random = torch.zeros(S, dtype=torch.bool, device=dev)
        self.stop_ids = torch.full((S, stop_width), -1, dtype=torch.int64, device=dev)
        self.version = 0  # bumped when a tensor is reallocated (captured graphs go stale)

    def upload(self, values, dtype: torch.dtype) -> torch.Tensor:
        """A host list as a device tensor without a blocking copy (pinned staging)."""
        host = torch.tensor(values, dtype=dtype)
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host

    def set_params(self, slots: list[int], requests: list[Request]) -> None:
        """Write the sampling parameters and stop ids of newly admitted requests."""
        width = max([len(r.stop_ids) for r in requests] + [1])
        if width > self.stop_ids.shape[1]:
            grown = torch.full((self.num_slots, width), -1, dtype=torch.int64, device=self.device)
            grown[:, : self.stop_ids.shape[1]] = self.stop_ids
            self.stop_ids = grown
            self.version += 1
        W = self.stop_ids.shape[1]
        idx = self.upload(slots, torch.int64)
        ps = [r.params for r in requests]
        self.temperature.index_copy_(
            0, idx, self.upload([p.temperature for p in ps], torch.float32)
        )
        self.top_k.index_copy_(0, idx, self.upload([p.top_k for p in ps], torch.int64))
        self.top_p.index_copy_(0, idx, self.upload([p.top_p for p in ps], torch.float32))
        self.random.index_copy_(
            0, idx, self.upload([r.seed is not None for r in requests], torch.bool)
        )
        stops = [list(r.stop_ids) + [-1] * (W - len(r.stop_ids)) for r in requests]
        self.stop_ids.index_copy_(0, idx, self.upload(stops, torch.int64))

    def clear(self, slots: list[int]) -> None:
        """Free slots: dead, greedy, no stop ids (stale rows stay inert)."""
        if not slots:
            return
        idx = self.upload(slots, torch.int64)
        self.live.index_fill_(0, idx, False)
        self.random.index_fill_(0, idx, False)
        self.temperature.index_fill_(0, idx, 0.0)
        self.budget.index_fill_(0, idx, 0)

    def host_sync_rows(self, B: int, requests: list[Request | None]) -> None:
        """Sync runners: upload the host-authoritative inputs of rows 0..B-1."""
        tok, pos, bud, live = [], [], [], []
        for r in requests[:B]:
            if r is None or r.finished:
                tok.append(0), pos.append(0), bud.append(0), live.append(False)
            else:
                tok.append(r.output.token_ids[-1]), pos.append(r.next_pos)
                bud.append(r.params.max_tokens - r.generated), live.append(True)
        self.next_token[:B] = self.upload(tok, torch.int64)
        self.next_pos[:B] = self.upload(pos, torch.int64)
        self.budget[:B] = self.upload(bud, torch.int64)
        self.live[:B] = self.upload(live, torch.bool)


class Ticket:
    """One in-flight transfer: host buffers and, on CUDA, the event that fills them."""

    def __init__(self, host: dict[str, torch.Tensor], event=None):
        self.host = host
        self.event = event
        self.collected = False


class HostTransfer:
    """Copies a round's device outputs to the host.

    On CUDA a side stream waits for the round (an event, no host sync), copies into
    pinned buffers (a ring of ``ring`` sets, reused only once collected) and records a
    ``done`` event; ``wait`` synchronises on that event only, so the host blocks on the
    round it reads and never on the round submitted after it. The tensors handed in
    must not be overwritten later by the compute stream (graph outputs are cloned
    first, see block_async.py); ``record_stream`` keeps their memory until the copy
    ran. On CPU the outputs are already final: ``submit`` clones.
    """

    def __init__(self, device: torch.device, ring: int = 3):
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.ring: list[dict[str, torch.Tensor]] = [{} for _ in range(ring)]
        self.tickets: list[Ticket | None] = [None] * ring
        self.count = 0

    def _buffer(self, slot: dict, name: str, t: torch.Tensor) -> torch.Tensor:
        buf = slot.get(name)
        if (
            buf is None
            or buf.dtype != t.dtype
            or buf.shape[1:] != t.shape[1:]
            or buf.shape[0] < t.shape[0]
        ):
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            slot[name] = buf
        return buf[: t.shape[0]]

    def submit(self, tensors: dict[str, torch.Tensor]) -> Ticket:
        if not self.cuda:
            return Ticket({k: v.detach().clone() for k, v in tensors.items()})
        i = self.count % len(self.ring)
        old = self.tickets[i]
        if old is not None and not old.collected:
            raise RuntimeError("host transfer ring overrun: collect rounds in order")
        self.count += 1
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        done = torch.cuda.Event()
        host = {}
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            for k, v in tensors.items():
                buf = self._buffer(self.ring[i], k, v)
                buf.copy_(v, non_blocking=True)
                v.record_stream(self.stream)  # keep the memory until the copy ran
                host[k] = buf
            done.record(self.stream)
        ticket = Ticket(host, done)
        self.tickets[i] = ticket
        return ticket

    @staticmethod
    def wait(ticket: Ticket) -> dict[str, np.ndarray]:
        if ticket.event is not None:
            ticket.event.synchronize()
        ticket.collected = True
        return {k: v.numpy() for k, v in ticket.host.items()}
