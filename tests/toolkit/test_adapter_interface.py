"""The typed engine interface (issue 31): an adapter missing a required member is
refused when it is loaded, in one line naming the member; and the `Engine` protocol
declares every method a runner calls on an engine (mypy proves the validated wrapper
has them: specconform/adapters/interface.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specconform.adapters.engine import AdapterError, load_engine
from specconform.adapters.interface import REQUIRED_METHODS, Engine, check_adapter
from tests.toolkit.plain_adapter import PlainAdapter

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.toolkit.test_adapter_interface"


def _complete():
    return PlainAdapter(4, "complete")


class _NoRunGroup:
    prompt = [1, 2]
    vocab_size = 4

    def describe(self):
        return {"name": "half", "version": "1"}

    def target_law(self, prefix):
        return np.full(4, 0.25)


class _NoPrompt:
    vocab_size = 4

    def describe(self):
        return {"name": "no-prompt", "version": "1"}


def without_run_group(spec, *, mutant=None, log=print):
    return _NoRunGroup()


def _spec(factory: str) -> SimpleNamespace:
    return SimpleNamespace(adapter=f"{HERE}:{factory}", max_tokens=3, num_speculative_tokens=3)


def test_a_complete_adapter_passes():
    check_adapter(_complete(), "complete")


def test_missing_method_is_one_line_naming_it_at_load_time():
    with pytest.raises(AdapterError) as caught:
        load_engine(_spec("without_run_group"), mutant=None, log=lambda line: None)
    message = str(caught.value)
    assert "\n" not in message
    assert "missing method run_group()" in message
    assert message.startswith(f"engine adapter {HERE}:without_run_group:")


def test_missing_attribute_is_named():
    with pytest.raises(AdapterError, match="missing attribute prompt"):
        check_adapter(_NoPrompt(), "x")


def test_every_required_method_is_checked():
    for method in REQUIRED_METHODS:
        adapter = _complete()
        setattr(adapter, method, None)  # present but not callable
        with pytest.raises(AdapterError, match=rf"missing method {method}\(\)"):
            check_adapter(adapter, "x")


def test_engine_protocol_declares_every_method_the_runners_call():
    """A static scan of the runners: every ``engine.<method>(`` they call is declared
    by `Engine`, so no runner reaches an engine by duck typing."""
    declared = set(dir(Engine))
    called = set()
    for path in (ROOT / "specconform/runner").glob("*.py"):
        called |= set(re.findall(r"\bengine\.([a-z_]+)\(", path.read_text()))
    called -= {"model_dump", "get"}  # the protocol's EngineSpec (pydantic), not an engine
    assert called, "the scan found no engine calls"
    assert called <= declared, sorted(called - declared)
