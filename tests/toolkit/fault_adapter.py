"""A fault-injecting engine adapter (issue 37, part 5): the toy numpy engine of
examples/my_adapter.py with one fault planted, selected by ``engine.options.fault``.

``engine.options.after`` (default 1) is how many ``run_group`` calls answer normally
first, so a distribution run has a checkpoint with a batch in it when a generation fault
strikes (a fault in a law strikes in the reference replay, after every batch). Each fault
and its expected outcome is a row of docs/contracts.md section 7, which
test_fault_injection.py reads.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

# Set to 1, the adapter generates without its fault (a resumed run after a hang).
HEALED_ENV = "SPECCONFORM_TEST_FAULT_HEALED"

# fault -> the adapter method it strikes
FAULTS = {
    "raises": "run_group",
    "exits": "run_group",
    "keyboard_interrupt": "run_group",
    "hangs_sleeping": "run_group",
    "hangs_spinning": "run_group",
    "hangs_ignoring_interrupts": "run_group",
    "hangs_in_factory": "factory",
    "too_few_records": "run_group",
    "token_out_of_range": "run_group",
    "wrong_shape": "target_law",
    "nan_law": "target_law",
    "inf_law": "target_law",
    "wrong_dtype": "target_law",
    "wrong_device": "target_law",
    "nondeterministic_batched": "target_laws",
}


def _hang_ignoring_interrupts() -> None:
    """A call that cannot be unwound in-process: it catches every interruption."""
    while True:
        try:
            time.sleep(10**6)
        except BaseException:  # noqa: BLE001, S110 (the fault: it swallows even Expired)
            pass


class FaultyEngine:
    def __init__(self, inner, fault: str, after: int):
        self._inner = inner
        self.fault = fault
        self.after = after
        self.vocab_size = inner.vocab_size
        self.prompt = inner.prompt
        self._calls = 0
        self._rng = np.random.default_rng(0)  # the non-deterministic fault's noise

    def describe(self) -> dict:
        d = self._inner.describe()
        if self.fault == "nondeterministic_batched":
            d["capabilities"] = {**d["capabilities"], "batched_target_laws": True}
        return d

    def run_group(self, group, seeds, progress=None):
        self._calls += 1
        healed = os.environ.get(HEALED_ENV) == "1"
        if healed or self._calls <= self.after or FAULTS[self.fault] != "run_group":
            return self._inner.run_group(group, seeds, progress)
        if self.fault == "raises":
            raise RuntimeError("device lost")
        if self.fault == "exits":
            raise SystemExit(0)
        if self.fault == "keyboard_interrupt":
            raise KeyboardInterrupt
        if self.fault == "hangs_sleeping":  # a Python-level hang
            time.sleep(10**6)
        if self.fault == "hangs_spinning":  # a busy loop that never sleeps
            while True:
                pass
        if self.fault == "hangs_ignoring_interrupts":
            _hang_ignoring_interrupts()
        records = self._inner.run_group(group, seeds, progress)
        if self.fault == "too_few_records":
            return records[:-1]
        r = records[0]  # token_out_of_range
        records[0] = dataclasses.replace(r, tokens=(self.vocab_size, *r.tokens[1:]))
        return records

    def target_law(self, prefix):
        law = self._inner.target_law(prefix)
        if self.fault == "wrong_shape":
            return np.append(law, 0.0)
        if self.fault == "nan_law":
            law = law.copy()
            law[0] = np.nan
        if self.fault == "inf_law":
            law = law.copy()
            law[0] = np.inf
        if self.fault == "wrong_dtype":
            return law.astype(np.float16)
        if self.fault == "wrong_device":  # a tensor, not a numpy array; "meta": no memory
            import torch

            return torch.empty(self.vocab_size, device="meta")
        return law

    def target_laws(self, prefixes):
        if self.fault != "nondeterministic_batched":
            return [self.target_law(p) for p in prefixes]
        # Non-deterministic where determinism is promised: batched must equal serial.
        # A different mix with the uniform law at each call: mass 1, off by >= 1e-3.
        return [
            (1 - e) * self._inner.target_law(p) + e / self.vocab_size
            for p, e in zip(prefixes, self._rng.uniform(0.01, 0.02, len(prefixes)), strict=True)
        ]

    def draft_law(self, prefix, depth):
        return self._inner.draft_law(prefix, depth)

    def close(self) -> None:
        self._inner.close()


def factory(spec, *, mutant=None, log=print):
    options = dict(spec.options)
    fault = options.pop("fault")
    after = int(options.pop("after", 1))
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    if fault == "hangs_in_factory":
        time.sleep(10**6)
    from examples.my_adapter import factory as toy_factory

    return FaultyEngine(toy_factory(spec.model_copy(update={"options": options})), fault, after)
