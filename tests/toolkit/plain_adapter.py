"""The smallest distribution adapter the adapter checks accept, for tests that need a
complete one (test_adapter_interface.py) or one that is no sequence engine
(test_sequence_run.py: it has no run_requests())."""

from __future__ import annotations

import numpy as np


class PlainAdapter:
    """describe(), run_group() with no records and a uniform target law over
    ``vocab_size`` tokens; the prompt is [1, 2]."""

    prompt = [1, 2]

    def __init__(self, vocab_size: int, name: str):
        self.vocab_size = vocab_size
        self.name = name

    def describe(self):
        return {"name": self.name, "version": "1"}

    def run_group(self, group, seeds, progress=None):
        return []

    def target_law(self, prefix):
        return np.full(self.vocab_size, 1 / self.vocab_size)
