"""Asynchronous block speculation: round n+1 is submitted before the host reads round n.

The device is authoritative for each slot's next input: the round itself (inside the
same CUDA Graph on GPU) writes the last committed token, its position, the remaining
budget and the slot's liveness (``advance_slots``); the host never uploads them. At
most two rounds are in flight: each ``step()`` admits and prefills new requests (device
only), submits the next round, then collects the older round. Results reach the host
through ``HostTransfer`` (a side stream into pinned memory on CUDA); the host commits
them in submission order, so a request that stopped (EOS, stop id, max_tokens) in
round n has its round n+1 row discarded -- the device, which saw the stop token in
round n, already treated that row as dead in round n+1.

Refills: the host learns of a finish one round late, so a freed slot would idle for a
round before a waiting request is prefilled into it. Where the host already knows that
a request's rounds in flight are its last (its budget bound is spent, typically a row
left with one token), ``release_spent_slots`` hands its slot to the waiting request at
once: the admission's device writes and the prefill are stream-ordered after those
rounds, and the request's own rounds are still collected and committed.

On CUDA the round (draft, verify, accept, state update) is captured once per batch
bucket and replayed (``GraphedRound``); on CPU the same function runs eagerly, with the
same semantics, so CI exercises this path.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from ..sampling import RngRegistry
from .block_runner import BlockSpeculationRunner
from .mutant_hooks import MutantHooks
from .spec_round import RoundOutputs
from .state import Request, SlotState, Ticket


def advance_slots(
    state: SlotState, rng: RngRegistry, out: RoundOutputs, hooks: MutantHooks
) -> None:
    """Device-side commit of one round into slots 0..B-1 (no host reads).

    A failed round (``out.failed``) advances no slot and rewinds the random rows'
    generators; its live rows die (the host finishes them with "error"). Otherwise a
    live row's next input becomes its last committed token at pos + num_committed,
    its budget drops by num_committed, and it dies on a committed stop token or an
    exhausted budget.
    """
    B, K1 = out.tokens.shape
    live = out.live
    failed = out.failed  # [1] bool
    advance = live & ~failed
    n = out.num_committed
    last = out.tokens.gather(1, (n - 1).clamp_min(0)[:, None]).squeeze(1)
    last = hooks.next_input(
        last, out.drafts, out.draft_lens, out.num_accepted, state.random[:B] & live
    )
    committed = torch.arange(K1, device=n.device)[None, :] < n[:, None]
    stop_hit = ((out.tokens[:, :, None] == state.stop_ids[:B, None, :]).any(-1) & committed).any(-1)
    budget = torch.where(advance, state.budget[:B] - n, state.budget[:B])
    state.next_token[:B] = torch.where(advance, last, state.next_token[:B])
    state.next_pos[:B] = torch.where(advance, out.pos + n, state.next_pos[:B])
    state.budget[:B] = budget
    state.live[:B] = advance & ~stop_hit & (budget > 0)
    rows = torch.arange(B, device=n.device)
    rng.rewind(rows, state.random[:B] & live & failed)


@dataclass
class InFlight:
    ticket: Ticket
    rows: list[Request | None]  # the request of each row when submitted
    admitted: list[Request]  # prefilled just before this round (t1 in the ticket)


class AsyncBlockRunner(BlockSpeculationRunner):
    mode = "async"

    def __init__(self, model, **kw):
        super().__init__(model, **kw)
        self.inflight: deque[InFlight] = deque()
        self.slots_released_early = 0  # release_spent_slots: slots refilled a round early

    # ------------------------------------------------------------------ the round
    def _round(self, B: int, W: int, trace: bool = False) -> tuple:
        out = self._speculative_round(B, W, trace)
        advance_slots(self.state, self.rng, out, self.hooks)
        return tuple(out)

    def submit_round(self, B: int, W: int | None = None) -> RoundOutputs:
        """Enqueue one round for slots 0..B-1 drafting at most W (default K) tokens per
        row; no host reads (graph replay on CUDA)."""
        return self.run_spec_round(B, self.K if W is None else W)

    # ------------------------------------------------------------------ scheduling
    def release_spent_slots(self) -> int:
        """Free the slot of every request the device has certainly stopped, before the
        host has collected its last round, so that a waiting request is refilled into it
        now instead of one round later. Returns how many slots were freed.

        A request whose host ``budget_bound`` is <= 0 while rounds are still in flight
        for it is dead on the device once those rounds ran: each of them commits at
        least one token (its budget runs out) or fails (a failed round kills its live
        rows), and a stop token only stops it sooner. It is therefore in no later
        snapshot, and its slot would idle for one round until the host collected the
        last one (async learns of a finish a round late). Reusing the slot now is safe
        because every device write of the admission (slot clear, parameters, generator
        binding, prefill) is stream-ordered after the rounds in flight. The request
        itself is untouched: its rounds are still collected and committed (``rows`` of
        each ``InFlight`` keeps it), and ``finish`` leaves a slot alone that another
        request took (``self.slots[req.slot] is req``). Typical case: a row left with a
        budget of one token, whose last round drafts nothing and commits one token."""
        freed = 0
        for s, req in enumerate(self.slots):
            if req is not None and req.inflight > 0 and req.budget_bound <= 0:
                self.slots[s] = None
                self._finished_slots.append((s, req.seed is not None))
                freed += 1
        self.flush_finished()
        self.slots_released_early += freed
        return freed

    def step(self) -> None:
        if len(self.waiting) > len(self._free):
            self.release_spent_slots()
        admitted = self.admit()
        pre = self.run_prefill(admitted) if admitted else None
        for r in admitted:
            r.inflight += 1
        B = self.bucket()
        if B:
            rows = self.snapshot(B)
            out = self.submit_round(B, self.draft_width(rows, self.K))
            for r in rows:
                if r is not None:
                    r.inflight += 1
            view = self.host_view(out, rows)
            if pre is not None:
                view.update(pre.host_view())
            self.inflight.append(InFlight(self.transfer.submit(view), rows, admitted))
        elif admitted:  # nothing to decode (all max_tokens == 1 or t1 failed): t1 alone
            self.inflight.append(InFlight(self.transfer.submit(pre.host_view()), [], admitted))
        # Keep one round in flight while there is work; otherwise drain.
        while len(self.inflight) > (1 if B else 0):
            self.collect()

    def collect(self) -> None:
        """Read the oldest in-flight round and commit it (prefill t1 first)."""
        flight = self.inflight.popleft()
        host = self.transfer.wait(flight.ticket)
        for r in flight.admitted + [r for r in flight.rows if r is not None]:
            r.inflight -= 1
        if flight.admitted:
            self.apply_prefill(flight.admitted, host)
        if flight.rows:
            self.apply_round(flight.rows, host)

    def drain(self) -> None:
        while self.inflight:
            self.collect()

    def has_work(self) -> bool:
        return super().has_work() or bool(self.inflight)
