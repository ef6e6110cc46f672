"""The architecture in one table (issue 31), held by tests:

- the kind table agrees with what lies below it (each schema's ``kind``; the detail
  records, stated once in the details layer, which readers use without importing
  evaluators) and every reference in it resolves;
- nothing outside the table compares protocol kind names;
- the runner never prints (results are typed; the CLI and report print them).

The import layers and cycles are `make imports` (.importlinter).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import pytest

from specconform import details
from specconform.kinds.registry import KINDS

ROOT = Path(__file__).resolve().parents[2]
NAMES = "|".join(KINDS)
QUOTED = rf"[\"'](?:{NAMES})[\"']"
# A kind name on either side of ==, != or `in (...)`.
COMPARISON = re.compile(rf"(?:==|!=|\bin)\s*\(?\s*{QUOTED}|{QUOTED}\s*(?:==|!=)")
# Nothing is excused: the table is the only place a kind is named in a comparison.
ALLOWED: set[str] = set()


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_each_kind_line_is_consistent(kind):
    (literal,) = get_args(kind.schema.model_fields["kind"].annotation)
    assert literal == kind.name
    assert kind.records  # every shipped kind's rows are typed (details.TYPED_KINDS)
    assert callable(kind.collect.load())
    if kind.plan is not None:
        assert callable(kind.plan.load())
    capabilities = kind.capabilities
    assert capabilities.ledgered == (kind.seed_ranges is not None)
    assert not capabilities.resumable or capabilities.ledgered
    assert not capabilities.reserves_in_runner or capabilities.ledgered


class _PluginDetail(details.Record):
    group: str
    hits: int


def test_a_plugin_kinds_records_register_once_and_read_back(monkeypatch):
    """A kind's records are stated in one place (the details layer): what a plug-in
    registers is what its Kind line reports and what its archived rows read back as."""
    monkeypatch.setattr(details, "TYPED_KINDS", dict(details.TYPED_KINDS))
    plugin = dataclasses.replace(KINDS["equality"], name="plugin_kind")
    obj = {"group": "sync", "hits": 3}
    # Negative control: before registering, the kind's rows are untyped JSON.
    assert plugin.records == ()
    assert isinstance(details.parse_detail(obj, "plugin_kind"), details.JsonDetail)
    details.register_records("plugin_kind", (_PluginDetail,))
    assert plugin.records == (_PluginDetail,)
    assert plugin.schema1_records == ()
    read = details.parse_detail(obj, "plugin_kind")
    assert read == _PluginDetail(group="sync", hits=3) and read.to_json() == obj
    with pytest.raises(details.DetailError, match="fits no plugin_kind record"):
        details.parse_detail({"group": "sync"}, "plugin_kind")  # a key missing


def test_no_kind_name_comparison_outside_the_table():
    found = []
    for path in sorted((ROOT / "specconform").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "specconform/kinds/registry.py" or rel in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if COMPARISON.search(line.split("#", 1)[0]):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []


def test_the_runner_never_prints():
    """Workers (``*_worker.py``) are separate processes whose stdout is their answer."""
    found = []
    for path in sorted((ROOT / "specconform/runner").glob("*.py")):
        if path.name.endswith("_worker.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\bprint\(|\bclick\.|Console\(|sys\.std(out|err)\.write", code):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []


def test_the_frozen_evaluator_imports_no_live_evaluator():
    """Schema-1 archives re-derive through frozen code only (kinds/distribution/legacy):
    a change to the live evaluator must not change what an old archive verifies to."""
    live = ("context", "mechanism", "rows", "tokens", "evaluate", "fixed", "sequential", "score")
    pattern = re.compile(
        rf"^\s*from\s+(?:\.\.|specconform\.kinds\.distribution\.)({'|'.join(live)})\b", re.M
    )
    for path in (ROOT / "specconform/kinds/distribution/legacy").glob("*.py"):
        assert not pattern.findall(path.read_text()), path.name
