"""Property-based tests of protocol loading as hostile input (issue 37.4), hypothesis.

Property: every input (generated YAML documents, YAML-ish text built from syntax
fragments, structural and textual mutations of the shipped protocols/*.yaml) ends in a
loaded protocol or a UsageError (ProtocolError included) whose message is one line;
never another exception, never more than LOAD_SECONDS. Two examples go through the real
CLI (`run_cli`): exit 2, one stderr line, nothing written.

Negative controls: the same property, run against a deliberately broken loader
(monkeypatched to raise a raw exception, print two lines or hang), must fail.

Profiles (bounded and derandomized by default; ``SPECCONFORM_HYPOTHESIS=long`` for the
long one): tests/toolkit/hostile_support.py. The archive properties are in
test_hostile_archive_properties.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specconform.protocol import load as load_module
from specconform.protocol.load import load_protocol
from specconform.protocol.union import KIND_NAMES
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.hostile_support import CONTROL, check_one_line, cli_examples, profile, summary

LOAD_SECONDS = 5.0
SOURCES = {p.name: p.read_bytes() for p in sorted((ROOT / "protocols").glob("*.yaml"))}


# --- protocol loading ------------------------------------------------------------------------


def check_load(path: Path) -> str:
    """The property: 'loaded' or 'refused' (one-line UsageError); anything else fails."""
    return check_one_line(load_protocol, path, LOAD_SECONDS, UsageError, ("loaded", "refused"))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def _write(folder: Path, data: bytes) -> Path:
    path = folder / "p.yaml"
    path.write_bytes(data)
    return path


HOSTILE_INTS = st.sampled_from(
    [-1, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64, 2**70, 10**20, 10**30, -(2**63)]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HOSTILE_INTS,
    st.floats(),  # nan, inf, subnormals
    st.text(max_size=20),
    st.binary(max_size=8),  # !!binary
    st.dates(),  # a YAML timestamp
    st.sampled_from(["x" * 10_000, "../../x:factory", "a:b", "bundled", "\ud800", "a\nb"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def generated_documents(draw) -> bytes:
    """YAML documents: mostly mappings with a real kind (so the schema is reached)."""
    doc = draw(st.dictionaries(st.text(max_size=12), VALUES, max_size=8))
    if draw(st.booleans()):
        doc["kind"] = draw(st.sampled_from(KIND_NAMES))
        doc["name"] = draw(st.one_of(st.just("p"), st.text(max_size=80)))
    top = draw(st.sampled_from(["mapping", "mapping", "mapping", "value"]))
    return yaml.safe_dump(doc if top == "mapping" else draw(VALUES)).encode()


FRAGMENTS = st.sampled_from(
    [
        "[", "]", "{", "}", ", ", ": ", "- ", "\n", "  ", "a", "b", "1", "0x1", "1:2:3",
        "1e999", ".nan", "&a ", "*a", "&b ", "*b", "<<: ", "!!binary ", "!!python/name:os.system ",
        "!!set ", "? ", "'", '"', "#", "---\n", "...\n", "kind: distribution\n", "\t", "\0",
        "\ufeff", "|\n", ">-\n", "%YAML 1.1\n", "\\u2028",
    ]
)  # fmt: skip


@st.composite
def fragment_documents(draw) -> bytes:
    return "".join(draw(st.lists(FRAGMENTS, max_size=60))).encode("utf-8", "surrogatepass")


def _paths(node, prefix=()):
    """Every path into a YAML tree (dict keys and list indices)."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


@st.composite
def mutated_protocols(draw) -> bytes:
    """A shipped protocol with one structural or textual mutation."""
    name = draw(st.sampled_from(sorted(SOURCES)))
    source = SOURCES[name]
    how = draw(st.sampled_from(["replace", "delete", "add", "text", "bytes", "none"]))
    if how in ("replace", "delete", "add"):
        tree = yaml.safe_load(source)
        path = draw(st.sampled_from(list(_paths(tree))[1:]))
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        if how == "replace":
            parent[path[-1]] = draw(VALUES)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(VALUES)
        else:
            parent.append(draw(VALUES))
        return yaml.safe_dump(tree, sort_keys=False).encode()
    lines = source.decode().splitlines(keepends=True)
    if how == "text":
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["duplicate", "delete", "insert", "indent"]))
        if op == "duplicate":  # a key given twice, at whatever level the line is
            lines.insert(i, lines[i])
        elif op == "delete":
            del lines[i]
        elif op == "insert":
            lines.insert(i, "".join(draw(st.lists(FRAGMENTS, max_size=8))) + "\n")
        else:
            lines[i] = "  " + lines[i]
        return "".join(lines).encode("utf-8", "surrogatepass")
    if how == "bytes":
        data = bytearray(source)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        return bytes(data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data)
    return source


def _load_property(strategy, name: str, outcomes: list[str] | None = None, **extra):
    found = [] if outcomes is None else outcomes

    @profile(name, **extra)
    @given(strategy)
    def run(scratch, data):
        found.append(check_load(_write(scratch, data)))

    return run


def test_generated_yaml_loads_or_is_refused_in_one_line(scratch):
    outcomes: list[str] = []
    _load_property(generated_documents(), "generated", outcomes)(scratch)
    summary("generated YAML", outcomes)


def test_yaml_fragments_load_or_are_refused_in_one_line(scratch):
    outcomes: list[str] = []
    _load_property(fragment_documents(), "fragments", outcomes)(scratch)
    summary("YAML fragments", outcomes)


def test_mutated_protocols_load_or_are_refused_in_one_line(scratch):
    outcomes = []

    @profile("mutated")
    @given(mutated_protocols())
    def run(data):
        outcomes.append(check_load(_write(scratch, data)))

    run()
    summary("mutated protocols", outcomes)
    # The strategy reaches both sides of the property (not only parse errors).
    assert outcomes.count("loaded") > 0 and outcomes.count("refused") > 0


# --- negative controls: a broken loader must make the property fail ---------------------------


def test_control_a_raw_exception_from_the_loader_fails_the_property(scratch, monkeypatch):
    real = load_module.validate

    def broken(data, path):
        real(data, path)
        raise KeyError("planted: a raw exception for a valid protocol")

    monkeypatch.setattr(load_module, "validate", broken)
    with pytest.raises(AssertionError, match="raw KeyError"):
        _load_property(mutated_protocols(), "control", **CONTROL)(scratch)


def test_control_a_recursion_error_from_the_parser_fails_the_property(scratch, monkeypatch):
    def broken(source):
        raise RecursionError("planted")

    monkeypatch.setattr(load_module, "parse_yaml", broken)
    with pytest.raises(AssertionError, match="raw RecursionError"):
        _load_property(fragment_documents(), "control", **CONTROL)(scratch)


def test_control_a_two_line_message_fails_the_property(scratch, monkeypatch):
    def broken(data, path):
        raise UsageError("first line\nsecond line")

    monkeypatch.setattr(load_module, "validate", broken)
    with pytest.raises(AssertionError, match="not one line"):
        _load_property(mutated_protocols(), "control", **CONTROL)(scratch)


def test_control_a_hanging_loader_fails_the_property(scratch, monkeypatch):
    monkeypatch.setattr(load_module, "parse_yaml", lambda source: time.sleep(60))
    monkeypatch.setattr(sys.modules[__name__], "LOAD_SECONDS", 0.2)
    with pytest.raises(AssertionError, match="hung"):
        _load_property(mutated_protocols(), "control", max_examples=2, **CONTROL)(scratch)


def test_cli_protocol_refusals_are_one_line_exit_2(tmp_path):
    # --seeds 0 is out of range for every kind (or not overridable): exit 2 even when
    # the mutated file loads, so no engine ever starts.
    for i, data in enumerate(cli_examples(mutated_protocols(), 2)):
        path = tmp_path / f"p{i}.yaml"
        path.write_bytes(data)
        result = run_cli("run", path, "--seeds", "0", "--out", tmp_path / "out", "--no-sign")
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "out").exists()
