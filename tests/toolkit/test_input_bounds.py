"""Hostile protocol files, case by case (issues 32.5, 37.1).

Every case ends in one line naming what is wrong and exit code 2 (UsageError or
ProtocolError). Most cases call the loader in-process; a few go through the real CLI
(`run_cli`) to show the exit code, the single stderr line and that nothing is written.
Archives: test_input_bounds_archive.py; property-based counterparts:
test_hostile_properties.py and test_hostile_archive_properties.py.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from specconform.protocol import yaml_safe
from specconform.protocol.load import json_schema, load_protocol
from specconform.protocol.schema_base import SEED_MAX
from specconform.util.errors import ProtocolError, UsageError
from tests.toolkit.cli_helpers import ROOT, assert_cli_refused, run_cli

CI_GATE = (ROOT / "protocols" / "ci_gate.yaml").read_text()


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(path: Path, *fragments: str, error=ProtocolError) -> str:
    start = time.monotonic()
    with pytest.raises(error) as info:
        load_protocol(path)
    assert time.monotonic() - start < 10, "refusal took too long"
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- 32.5: duplicate keys ------------------------------------------------------------------


def test_duplicate_top_level_key_names_key_and_both_lines(tmp_path):
    path = _write(tmp_path, CI_GATE + "alpha: 0.05\n")
    first = CI_GATE.splitlines().index("alpha: 0.01") + 1
    last = len(CI_GATE.splitlines()) + 1
    _refused(path, "duplicate key 'alpha'", f"lines {first} and {last}")


def test_duplicate_nested_key_is_refused(tmp_path):
    text = CI_GATE.replace("  top_k: 20\n", "  top_k: 20\n  top_k: 40\n")
    line = text.splitlines().index("  top_k: 20") + 1
    _refused(_write(tmp_path, text), "duplicate key 'top_k'", f"lines {line} and {line + 1}")


def test_duplicate_key_in_a_flow_mapping_and_equal_python_keys(tmp_path):
    _refused(_write(tmp_path, "a: {x: 1, x: 2}\n"), "duplicate key 'x'", "lines 1 and 1")
    _refused(_write(tmp_path, "1: a\n0x1: b\n"), "duplicate key 1", "lines 1 and 2")


def test_merge_keys_may_still_be_overridden(tmp_path):
    text = "base: &b {x: 1, y: 2}\nderived: {<<: *b, x: 3}\n"
    assert yaml_safe.parse_yaml(text.encode())["derived"] == {"x": 3, "y": 2}


# --- 37.1: bounds at the schema --------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, fragments",
    [
        ("top_k: 20", f"top_k: {2**70}", ["engine.top_k", "less than or equal to 262144"]),
        ("min_samples: 200", f"min_samples: {10**20}", ["strata.min_samples", "10000000000"]),
        ("name: ci_gate", "name: " + "x" * 10_000, ["field 'name'", "at most 64 characters"]),
        ("offset: 0", f"offset: {SEED_MAX + 1}", ["seeds.offset", "seed domain [0, 2**63)"]),
        ("temperature: 1.0", "temperature: 1e999", ["engine.temperature"]),
        ("temperature: 1.0", "temperature: .nan", ["engine.temperature"]),
        ("count: 2000", "count: 1000000000", ["seeds.count"]),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, old, new, fragments):
    assert old in CI_GATE
    _refused(_write(tmp_path, CI_GATE.replace(old, new, 1)), *fragments)


@pytest.mark.parametrize(
    "adapter", ["../../x:factory", "a/b:c", "os.system", "a:b:c", "x:", ":f", "a b:c", "1x:f"]
)
def test_adapter_references_are_validated_before_any_import(tmp_path, adapter):
    text = CI_GATE.replace("engine:\n", f"engine:\n  adapter: '{adapter}'\n", 1)
    _refused(_write(tmp_path, text), "engine.adapter", "expected 'bundled', 'hf'")


def test_valid_adapter_references_still_load(tmp_path):
    for adapter in ("bundled", "hf", "my_pkg.adapters:factory", "_x:_y"):
        text = CI_GATE.replace("engine:\n", f"engine:\n  adapter: '{adapter}'\n", 1)
        assert load_protocol(_write(tmp_path, text)).model.engine.adapter == adapter


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    # libyaml stops at its own depth limit (1,000), the composer at 32.
    _refused(_write(tmp_path, "a: " + "[" * 20_000 + "]" * 20_000 + "\n"), "nest")
    _refused(_write(tmp_path, "a: " + "[" * 40 + "]" * 40 + "\n"), "nested deeper than 32")
    _refused(_write(tmp_path, "a:\n" + "".join(" " * i + "- \n" for i in range(1, 60))), "deeper")


@pytest.mark.parametrize("fast", [True, False], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize(
    "text, fragment",
    [
        ("a: " + "[" * 40 + "]" * 40, "nested deeper than 32"),
        ("a: &a [*a]", "refers to a node that contains it"),
        ("a: 1\nb: {c: 2, c: 3}", "duplicate key 'c' (lines 2 and 2)"),
        ("a: " + "9" * 65, "number of 65 characters"),
        ("a: [" + ", ".join(["1"] * 1500) + "]", "more than 1000 values"),
        (
            "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
            "once aliases are expanded",
        ),
    ],
)
def test_both_parsers_enforce_the_limits(text, fragment, fast, monkeypatch):
    monkeypatch.setattr(yaml_safe, "MAX_NODES", 1000)  # the real 2**17 is slow to reach
    with pytest.raises(yaml_safe.YamlRefused, match=re.escape(fragment)):
        yaml_safe.parse_yaml(text.encode(), fast=fast)


def test_alias_expansion_is_bounded(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    _refused(_write(tmp_path, "\n".join(lines) + "\n"), "once aliases are expanded")
    _refused(_write(tmp_path, "a: &a [*a]\n"), "refers to a node that contains it")
    many = "a: &a x\nb: [" + ", ".join(["*a"] * 2000) + "]\n"
    _refused(_write(tmp_path, many), "more than 1024 aliases")
    # Aliases nested through each other add their depth.
    deep = "a0: &a0 [[[[[[[[x]]]]]]]]\n" + "".join(
        f"a{i}: &a{i} [[[[[[[[*a{i - 1}]]]]]]]]\n" for i in range(1, 6)
    )
    _refused(_write(tmp_path, deep), "once aliases are expanded")


def test_long_numbers_are_refused_before_conversion(tmp_path):
    _refused(_write(tmp_path, "a: " + "7" * 5000 + "\n"), "number of 5000 characters")
    sexagesimal = "a: " + ":".join(["1"] * 100_000) + "\n"  # quadratic in int()
    _refused(_write(tmp_path, sexagesimal), "number of")


def test_protocol_files_must_be_small_regular_files(tmp_path):
    _refused(Path("/dev/zero"), "not a regular file", error=UsageError)
    _refused(tmp_path, "a directory", error=UsageError)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # no writer: opening it must not block
    _refused(fifo, "not a regular file", error=UsageError)
    big = _write(tmp_path, "# " + "x" * (1 << 20) + "\n" + CI_GATE)
    _refused(big, "larger than 1 MiB", error=UsageError)
    _refused(tmp_path / "absent.yaml", "cannot read protocol file", error=UsageError)


def test_adapter_options_hold_json_values_only(tmp_path):
    # bytes (!!binary) broke the canonical JSON of the hash: a raw serialization error.
    for value in ("!!binary /////w==", "2001-12-14", "!!set {a}"):
        text = CI_GATE.replace("engine:\n", f"engine:\n  options: {{x: {value}}}\n", 1)
        _refused(_write(tmp_path, text), "engine.options.x", "not a valid JSON value")


def test_git_refs_cannot_be_options(tmp_path):
    text = (ROOT / "protocols" / "performance.yaml").read_text() + "base_ref: --upload-pack=x\n"
    _refused(_write(tmp_path, text), "base_ref must be a git ref")


def test_a_path_with_a_nul_byte_is_a_usage_error():
    _refused(Path("/tmp/a\0b.yaml"), "embedded null byte", error=UsageError)


def test_messages_with_hostile_text_stay_on_one_line(tmp_path):
    message = _refused(_write(tmp_path, CI_GATE + '"x\\ny\\u2028z": 1\n'), "unknown field")
    assert "\\n" in message
    _refused(_write(tmp_path, CI_GATE.replace("description: >-", 'description: "\\ud800"\nx: >-')))


def test_every_field_of_every_schema_is_bounded():
    """Every integer and float has a maximum, every string a maximum length, every list
    and mapping a maximum size (Literal choices are bounded by their enum)."""
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            kind = node.get("type")
            if "enum" in node or "const" in node:
                pass
            elif kind in ("integer", "number") and not {"maximum", "exclusiveMaximum"} & set(node):
                missing.append(where)
            elif kind == "string" and "maxLength" not in node:
                missing.append(where)
            elif kind == "array" and "maxItems" not in node:
                missing.append(where)
            elif kind == "object" and "additionalProperties" in node:
                if node["additionalProperties"] is not False and "maxProperties" not in node:
                    missing.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(json_schema(), "")
    assert not missing, missing


def test_shipped_protocols_load_within_the_bounds():
    for path in sorted((ROOT / "protocols").glob("*.yaml")):
        load_protocol(path)


# --- through the CLI --------------------------------------------------------------------


def test_cli_exit_2_one_line_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    cases = {
        "dup.yaml": (CI_GATE + "alpha: 0.05\n", "duplicate key 'alpha'"),
        "adapter.yaml": (
            CI_GATE.replace("engine:\n", "engine:\n  adapter: ../../x:factory\n", 1),
            "expected 'bundled'",
        ),
        "deep.yaml": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nest"),
    }
    for name, (text, fragment) in cases.items():
        result = run_cli("run", _write(tmp_path, text, name), "--out", out, "--no-sign")
        assert_cli_refused(result, 2, fragment)
    assert_cli_refused(run_cli("run", "/dev/zero", "--out", out, "--no-sign"), 2, "regular file")
    assert not out.exists()
    schema = json.loads(run_cli("schema").stdout)
    engine = schema["$defs"]["EngineSpec"]["properties"]
    assert engine["top_k"]["maximum"] == 262144 and engine["adapter"]["maxLength"] == 256
