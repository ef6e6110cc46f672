"""Output validation of engine adapters: every answer is checked before it is used.

A broken adapter must never yield a verdict: a wrong shape or an out-of-range token would
otherwise become a misleading FAIL (or, worse, a PASS over garbage). Every check raises
`AdapterError` with one line naming the adapter, the method and what is wrong. The
checks are structural (types, shapes, ranges, telemetry consistency), never
statistical: a sampler with the wrong law passes them and is caught by the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral

import numpy as np

from specconform.adapters.interface import check_adapter
from specconform.adapters.sequence_checks import SEQUENCE_METHODS, SequenceChecks
from specconform.adapters.types import (
    TOKEN_KINDS,
    AdapterError,
    AdapterInfo,
    Capabilities,
    SeedRecord,
    TokenEvent,
    one_line,
    source_digest,
)
from specconform.adapters.watchdog import timed_call, timeout_message

# A law's total mass may differ from 1 by float32 rounding over a large vocabulary.
MASS_TOLERANCE = 1e-4
# Batched laws must equal the serial ones up to float32 summation order. A GEMM over B
# rows tiles its D-long reductions differently from one over one row, so logits differ
# by a few ulps each and softmax carries that into |dp| <= 2 p max|dlogit|: measured
# 1.2e-6 on CPU (ci_gate --sequential) and, for float32 forwards of different lengths
# on CUDA, up to 9.6e-6 (teacher forcing against the serial replay, docs/gpu-runs.md;
# sequence.yaml states 1e-4 for that comparison too). A real
# difference (another top-k or temperature, a bf16 q) moves p by >= 1e-3, and the
# smallest law difference a protocol sees at 20,000 seeds is ~1e-2 in TV: 1e-4 keeps
# 10x from both. The support must match exactly.
BATCHED_TOLERANCE = 1e-4


def _is_int(x) -> bool:
    # type() first: the ABC check costs ~1 us, and a batch checks ~10 ints per record.
    return type(x) is int or (isinstance(x, Integral) and not isinstance(x, bool))


class CheckedEngine(SequenceChecks):
    """Wraps an adapter; the runner talks only to this. Attributes: info (`AdapterInfo`),
    prompt (list[int]), vocab_size (int)."""

    def __init__(self, adapter, name: str, spec):
        check_adapter(adapter, name)  # the required members, before any call
        self._a = adapter
        self.name = name
        self._spec = spec
        # Seconds each adapter call may take (adapters.watchdog); a spec without the
        # field (a test's stand-in) leaves calls untimed.
        self._timeout: float | None = getattr(spec, "call_timeout_s", None)
        self.info = self._describe()
        self.vocab_size = self._vocab_size()
        self.prompt = self._prompt()

    def _fail(self, what: str) -> AdapterError:
        return AdapterError(f"engine adapter {self.name}: {what}")

    def _call(self, method: str, *args):
        fn = getattr(self._a, method, None)
        if not callable(fn):
            raise self._fail(f"has no method {method}()")
        return timed_call(
            fn,
            args,
            seconds=self._timeout,
            message=timeout_message(f"engine adapter {self.name}", f"{method}()", self._timeout),
            failed=lambda exc: self._fail(f"{method}() raised {one_line(exc)}"),
        )

    # -- identity ---------------------------------------------------------------------
    def _describe(self) -> AdapterInfo:
        d = self._call("describe")
        if not isinstance(d, Mapping):
            raise self._fail(f"describe() returned {type(d).__name__}, expected a dict")
        for key in ("name", "version"):
            if not isinstance(d.get(key), str) or not d.get(key):
                raise self._fail(f"describe()['{key}'] must be a non-empty string")
        packages = d.get("packages", {})
        if not isinstance(packages, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in packages.items()
        ):
            raise self._fail("describe()['packages'] must map package names to version strings")
        named = d.get("engine_package")
        if named is not None and (not isinstance(named, str) or not named.isidentifier()):
            raise self._fail("describe()['engine_package'] must be an importable package name")
        caps = d.get("capabilities", {})
        fields = set(Capabilities.__dataclass_fields__)
        if (
            not isinstance(caps, Mapping)
            or set(caps) - fields
            or not all(isinstance(v, bool) for v in caps.values())
        ):
            raise self._fail(
                f"describe()['capabilities'] must map some of {sorted(fields)} to true/false"
            )
        caps = dict(caps)
        caps.setdefault("draft_law", callable(getattr(self._a, "draft_law", None)))
        caps.setdefault("batched_target_laws", callable(getattr(self._a, "target_laws", None)))
        caps.setdefault("batched_draft_laws", callable(getattr(self._a, "draft_laws", None)))
        has = {m: callable(getattr(self._a, m, None)) for m in SEQUENCE_METHODS}
        caps.setdefault("sequence", has["run_requests"] and has["target_law_for"])
        caps.setdefault("sequence_laws", has["sequence_laws"])
        caps.setdefault("logits", has["target_logits"])
        caps.setdefault("trace", False)  # only the adapter knows whether it traces
        needs = {
            "draft_law": ("draft_law",),
            "batched_target_laws": ("target_laws",),
            "batched_draft_laws": ("draft_laws", "draft_law"),
            "sequence": ("run_requests", "target_law_for"),
            "sequence_laws": ("sequence_laws",),
            "logits": ("target_logits",),
            "trace": ("run_requests",),
        }
        for key, methods in needs.items():
            for method in methods:
                if caps[key] and not callable(getattr(self._a, method, None)):
                    raise self._fail(f"capabilities say {key} but there is no {method}() method")
        source, digest = source_digest(self._a)
        from specconform.adapters.provenance import engine_package

        return AdapterInfo(
            d["name"],
            d["version"],
            tuple(sorted(packages.items())),
            Capabilities(**caps),
            source,
            digest,
            engine=engine_package(self._a, d),
        )

    def _vocab_size(self) -> int:
        v = getattr(self._a, "vocab_size", None)
        if not _is_int(v) or v < 2:
            raise self._fail(f"vocab_size must be an int >= 2, got {v!r}")
        return int(v)

    def _prompt(self) -> list[int]:
        p = getattr(self._a, "prompt", None)
        if not isinstance(p, Sequence) or not p or not all(_is_int(t) for t in p):
            raise self._fail("prompt must be a non-empty list of token ids")
        self._tokens_in_range("prompt", p)
        return [int(t) for t in p]

    def _tokens_in_range(self, where: str, tokens) -> None:
        for t in tokens:
            if not 0 <= int(t) < self.vocab_size:
                raise self._fail(f"{where}: token {int(t)} outside [0, {self.vocab_size})")

    # -- generation -------------------------------------------------------------------
    def check_groups(self, groups) -> None:
        """Before anything is written: the adapter's optional check_group(group) refuses
        configurations it cannot run (one UsageError line naming the field)."""
        check = getattr(self._a, "check_group", None)
        if callable(check):
            for group in groups:
                self._call("check_group", group)

    def run_group(self, group, seeds: list[int], progress=None) -> list[SeedRecord]:
        records = self._call("run_group", group, list(seeds), progress)
        if not isinstance(records, list) or len(records) != len(seeds):
            n = len(records) if isinstance(records, list) else type(records).__name__
            raise self._fail(f"run_group({group.name}) returned {n} records for {len(seeds)} seeds")
        for seed, rec in zip(seeds, records, strict=True):
            self._check_record(group, seed, rec)
        return records

    def _check_record(self, group, seed: int, rec) -> None:
        where = f"run_group({group.name}) seed {seed}"
        if not isinstance(rec, SeedRecord):
            raise self._fail(f"{where}: got {type(rec).__name__}, expected a SeedRecord")
        if rec.seed != seed:
            raise self._fail(
                f"{where}: record for seed {rec.seed} (records must follow seed order)"
            )
        toks = rec.tokens
        if not isinstance(toks, tuple) or not all(_is_int(t) for t in toks):
            raise self._fail(f"{where}: tokens must be a tuple of ints")
        if not 1 <= len(toks) <= self._spec.max_tokens:
            raise self._fail(f"{where}: {len(toks)} tokens, expected 1..{self._spec.max_tokens}")
        self._tokens_in_range(where, toks)
        if rec.first_accepted not in (-1, 0, 1) or not _is_int(rec.first_accepted):
            raise self._fail(f"{where}: first_accepted must be -1, 0 or 1")
        K = self._spec.num_speculative_tokens
        for drafted, accepted in rec.rounds:
            if not (_is_int(drafted) and _is_int(accepted) and 0 <= accepted <= drafted <= K):
                raise self._fail(
                    f"{where}: round ({drafted}, {accepted}) breaks "
                    f"0 <= accepted <= drafted <= K={K}"
                )
        if group.mode == "nospec" and (any(d for d, _ in rec.rounds) or rec.first_accepted != -1):
            raise self._fail(f"{where}: a nospec group drafts nothing")
        if rec.events is not None:
            self._check_events(where, group, rec)
            # first_accepted: was t2 a draft, and was it accepted (SeedRecord's docstring)?
            want = (
                {"accepted": 1, "correction": 0}.get(rec.events[1].kind, -1)
                if len(rec.events) > 1
                else -1
            )
            if rec.first_accepted != want:
                raise self._fail(
                    f"{where}: first_accepted {rec.first_accepted} disagrees with "
                    f"t2's event {rec.events[1] if len(rec.events) > 1 else None}"
                )

    def _check_events(self, where: str, group, rec: SeedRecord) -> None:
        ev = rec.events
        if (
            not isinstance(ev, tuple)
            or len(ev) != len(rec.tokens)
            or not all(isinstance(e, TokenEvent) and e.kind in TOKEN_KINDS for e in ev)
        ):
            raise self._fail(
                f"{where}: events must be one TokenEvent per committed token, "
                f"kind one of {', '.join(TOKEN_KINDS)}"
            )
        if group.mode == "nospec" and any(e.kind != "target" for e in ev):
            raise self._fail(f"{where}: a nospec group commits only target samples")
        per_round: dict[int, list[TokenEvent]] = {}
        for e in ev:
            if e.kind == "target":
                continue
            if not 0 <= e.round < len(rec.rounds):
                raise self._fail(f"{where}: event in round {e.round} of {len(rec.rounds)}")
            per_round.setdefault(e.round, []).append(e)
        for r, events in per_round.items():
            drafted, accepted = rec.rounds[r]
            kinds = [e.kind for e in events]
            n_acc = kinds.count("accepted")
            closing = [k for k in kinds if k != "accepted"]
            # A round commits its accepted drafts at positions 0.., then one closing token.
            if (
                n_acc > accepted
                or len(closing) > 1
                or (closing and kinds[-1] == "accepted")
                or [e.position for e in events] != list(range(len(events)))
            ):
                raise self._fail(
                    f"{where}: events of round {r} ({kinds}) do not fit "
                    f"drafted={drafted} accepted={accepted}"
                )
            if closing and closing[0] == "bonus" and accepted != drafted:
                raise self._fail(f"{where}: a bonus in round {r} with a rejected draft")
            if closing and closing[0] == "correction" and accepted == drafted:
                raise self._fail(f"{where}: a correction in round {r} with no rejection")

    # -- laws -------------------------------------------------------------------------
    def _check_law(self, where: str, law) -> np.ndarray:
        if not isinstance(law, np.ndarray):
            hint = (
                " (convert with .cpu().numpy())" if type(law).__module__.startswith("torch") else ""
            )
            raise self._fail(f"{where} returned {type(law).__name__}, expected a numpy array{hint}")
        if law.dtype not in (np.float32, np.float64):
            raise self._fail(f"{where} has dtype {law.dtype}, expected float32 or float64")
        if law.shape != (self.vocab_size,):
            raise self._fail(f"{where} has shape {law.shape}, expected ({self.vocab_size},)")
        if not np.all(np.isfinite(law)) or law.min() < 0:
            raise self._fail(f"{where} has negative or non-finite entries")
        mass = float(law.sum(dtype=np.float64))
        if abs(mass - 1.0) > MASS_TOLERANCE:
            raise self._fail(f"{where} sums to {mass:.6g}, not 1")
        return law

    def target_law(self, prefix: list[int]) -> np.ndarray:
        self._tokens_in_range("target_law prefix", prefix)
        return self._check_law(
            f"target_law(prefix of {len(prefix)})", self._call("target_law", list(prefix))
        )

    def draft_law(self, prefix: list[int], depth: int) -> np.ndarray | None:
        """q at `depth`, or None when the adapter cannot give q."""
        if not self.info.capabilities.draft_law:
            return None
        return self._check_law(
            f"draft_law(prefix of {len(prefix)}, {depth})",
            self._call("draft_law", list(prefix), depth),
        )

    def target_laws(self, prefixes: list[list[int]]) -> list[np.ndarray]:
        """Laws of many prefixes; the batched path when the adapter has one, checked
        against the serial path (batched must equal serial)."""
        if not self.info.capabilities.batched_target_laws or not prefixes:
            return [self.target_law(p) for p in prefixes]
        return self._batched("target_laws", prefixes, (), self.target_law)

    def draft_laws(self, prefixes: list[list[int]], depth: int) -> list[np.ndarray] | None:
        """q at `depth` for many prefixes (None when the adapter cannot give q); batched
        and checked like `target_laws` when the adapter has ``draft_laws``."""
        if not self.info.capabilities.draft_law:
            return None
        if not self.info.capabilities.batched_draft_laws or not prefixes:
            return [self.draft_law(p, depth) for p in prefixes]  # type: ignore[misc]
        return self._batched("draft_laws", prefixes, (depth,), lambda p: self.draft_law(p, depth))

    def _batched(self, method: str, prefixes, args: tuple, serial) -> list[np.ndarray]:
        """The adapter's batched `method`, validated law by law and compared with the
        serial path on the first, middle and last prefix: max |dp| within
        BATCHED_TOLERANCE and the same support (a token of mass 1e-9 against 0 is a
        different support, which the out-of-support rule would judge)."""
        laws = self._call(method, [list(p) for p in prefixes], *args)
        if not isinstance(laws, Sequence | np.ndarray) or len(laws) != len(prefixes):
            raise self._fail(
                f"{method}() returned {type(laws).__name__} for {len(prefixes)} prefixes"
            )
        laws = [self._check_law(f"{method}()[{i}]", law) for i, law in enumerate(laws)]
        for i in sorted({0, len(prefixes) // 2, len(prefixes) - 1}):
            one = serial(prefixes[i])
            diff = float(np.max(np.abs(one.astype(np.float64) - laws[i])))
            same_support = np.array_equal(one > 0, laws[i] > 0)
            if diff > BATCHED_TOLERANCE or not same_support:
                raise self._fail(
                    f"{method}()[{i}] differs from the one-prefix law by {diff:.3g} "
                    f"(support {'equal' if same_support else 'differs'}; "
                    "batched must equal serial)"
                )
        return laws

    def close(self) -> None:
        """The adapter's close(), timed like every call: after a timed-out call the
        engine may hang here too."""
        if callable(getattr(self._a, "close", None)):
            self._call("close")
