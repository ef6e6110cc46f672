"""The ``stops`` check of a sequence run: every request ends exactly where its stop rule
says, from its committed tokens alone (black-box: any engine's records suffice).

A request of max_tokens M and stop ids S (plus the engine's EOS unless ignore_eos)
commits tokens until the first stop token, which it keeps, or until M tokens. So, per
request, a mismatch is any of:

- a stop id of S before the last token (a token committed after a stop);
- finish_reason "length" with fewer than M tokens, or with a stop id of S last;
- finish_reason "stop" whose last token is neither in S nor the EOS (below);
- the EOS before the last token of a request that does not ignore EOS.

The toolkit is not told the engine's EOS id. It learns it from the records: a request
that ignores no EOS and finished "stop" on a token outside S ended on the EOS. An
engine has one EOS, so two different such tokens are a mismatch (one of them ended a
request that should have gone on); the EOS found then applies to every request of the
run that does not ignore EOS. A request that ignores EOS and finished "stop" on a token
outside S is a mismatch. Requests that ended in "error" or "abort" are not checked (the
engine_errors row reads them).

What this check cannot see, the PIT does: the stop token itself is a committed token,
tested against p like every other, so the length law (the first stop time) is the law
of the committed tokens; this check adds that the sequence ends exactly there.
"""

from __future__ import annotations

from collections.abc import Sequence

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.runner.sequence_checks import CheckTally

Checked = tuple[dict, RequestSpec, SequenceRecord]  # (where, request, its record)


def learned_eos(items: Sequence[Checked]) -> set[int]:
    """Tokens that ended a "stop" request which honours EOS, outside its stop ids."""
    return {
        int(rec.tokens[-1])
        for _, req, rec in items
        if rec.finish_reason == "stop"
        and not req.ignore_eos
        and rec.tokens
        and int(rec.tokens[-1]) not in req.stop_token_ids
    }


def stop_check(tally: CheckTally, items: Sequence[Checked]) -> CheckTally:
    """One comparison per finished request (see the module docstring)."""
    eos = learned_eos(items)
    for where, req, rec in items:
        if rec.finish_reason not in ("stop", "length"):
            continue
        tally.add(*_one(req, rec, eos, where))
    return tally


def _one(req: RequestSpec, rec: SequenceRecord, eos: set[int], where: dict):
    toks = [int(t) for t in rec.tokens]
    stops = set(req.stop_token_ids) | (set() if req.ignore_eos else eos)
    example = {**where, "tokens": len(toks), "finish_reason": rec.finish_reason}
    early = next((i for i, t in enumerate(toks[:-1]) if t in stops), None)
    if early is not None:
        return False, {**example, "problem": "token after a stop", "stop_step": early}
    if not req.ignore_eos and len(eos) > 1:
        return False, {**example, "problem": f"two EOS tokens ended requests: {sorted(eos)}"}
    last = toks[-1] if toks else None
    if rec.finish_reason == "length":
        if len(toks) != req.max_tokens:
            return False, {**example, "problem": f"length before max_tokens {req.max_tokens}"}
        if last in req.stop_token_ids:
            return False, {**example, "problem": "ended on a stop id but reported length"}
        return True, example
    if last in req.stop_token_ids or (not req.ignore_eos and last in eos):
        return True, example
    return False, {**example, "problem": "stop on a token that is no stop id"}
