"""Property-based tests of hostile input (issue 37.4), with hypothesis.

Properties:

- protocol loading: every input (generated YAML documents, YAML-ish text built from
  syntax fragments, structural and textual mutations of the shipped protocols/*.yaml)
  ends in a loaded protocol or a UsageError (ProtocolError included) whose message is one
  line; never another exception, never more than LOAD_SECONDS;
- archive verification: every mutation of a real small archive (flipped, inserted or
  deleted bytes; header fields of the local headers, central directory and end record
  set to chosen values) ends in a verified archive or an EvidenceError with one line and
  exit code 3; never another exception, never more than VERIFY_SECONDS;
- a few examples of each go through the real CLI (`run_cli`): exit 2 / 0 or 3, one
  stderr line, no traceback.

Each property has a negative control: the same property, run against a deliberately
broken loader or reader (monkeypatched to raise a raw exception, print two lines or
hang), must fail.

Profiles. By default the bounded CI profile runs: ``derandomize=True`` (the same
examples on every run: CI is never flaky) and few enough examples that the whole file
takes well under 60 s on one core (see CI_EXAMPLES). The long profile, on demand::

    SPECCONFORM_HYPOTHESIS=long .venv/bin/python -m pytest -q tests/toolkit/test_hostile_properties.py

runs LONG_EXAMPLES random (not derandomized) examples per property; set
SPECCONFORM_HYPOTHESIS_EXAMPLES=N to choose N.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from specconform.errors import EvidenceError, SpecconformError, UsageError
from specconform.evidence import seal, verify_archive
from specconform.protocol import load as load_module
from specconform.protocol.load import load_protocol
from specconform.protocol.union import KIND_NAMES
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.fixtures import evidence_toy as toy

LONG = os.environ.get("SPECCONFORM_HYPOTHESIS") == "long"
CI_EXAMPLES = {"generated": 150, "fragments": 150, "mutated": 200, "bytes": 150, "headers": 150}
LONG_EXAMPLES = int(os.environ.get("SPECCONFORM_HYPOTHESIS_EXAMPLES", "5000"))
LOAD_SECONDS = 5.0
VERIFY_SECONDS = 10.0
PROTOCOLS = sorted((ROOT / "protocols").glob("*.yaml"))
SOURCES = {p.name: p.read_bytes() for p in PROTOCOLS}


def profile(name: str, **extra):
    """The settings of one property: bounded and derandomized, or long and random."""
    chosen = {
        "max_examples": LONG_EXAMPLES if LONG else CI_EXAMPLES.get(name, 20),
        "derandomize": not LONG,
        "database": None,
        "deadline": None,
        "suppress_health_check": list(HealthCheck),
        "print_blob": True,
    }
    return settings(**{**chosen, **extra})


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` swallows it."""


@contextmanager
def time_limit(seconds: float):
    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_one_line(error: SpecconformError) -> None:
    message = str(error)
    assert message and len(message.splitlines()) == 1, f"not one line: {message!r}"


# --- protocol loading ------------------------------------------------------------------------


def check_load(path: Path) -> str:
    """The property: 'loaded' or 'refused' (one-line UsageError); anything else fails."""
    try:
        with time_limit(LOAD_SECONDS):
            load_protocol(path)
    except UsageError as exc:
        assert_one_line(exc)
        return "refused"
    except Hang as exc:
        raise AssertionError(f"load_protocol hung: {exc}") from None
    except Exception as exc:
        raise AssertionError(f"raw {type(exc).__name__} from load_protocol: {exc!r}") from exc
    return "loaded"


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


def _summary(what: str, outcomes: list[str]) -> None:
    """Printed with -s: how many examples ran and how they ended."""
    counts = {k: outcomes.count(k) for k in sorted(set(outcomes))}
    print(f"\n{what}: {len(outcomes)} examples {counts}")


def test_generated_yaml_loads_or_is_refused_in_one_line(scratch):
    outcomes: list[str] = []
    _load_property(generated_documents(), "generated", outcomes)(scratch)
    _summary("generated YAML", outcomes)


def test_yaml_fragments_load_or_are_refused_in_one_line(scratch):
    outcomes: list[str] = []
    _load_property(fragment_documents(), "fragments", outcomes)(scratch)
    _summary("YAML fragments", outcomes)


def test_mutated_protocols_load_or_are_refused_in_one_line(scratch):
    outcomes = []

    @profile("mutated")
    @given(mutated_protocols())
    def run(data):
        outcomes.append(check_load(_write(scratch, data)))

    run()
    _summary("mutated protocols", outcomes)
    # The strategy reaches both sides of the property (not only parse errors).
    assert outcomes.count("loaded") > 0 and outcomes.count("refused") > 0


# --- negative controls: a broken loader must make the property fail ---------------------------

CONTROL = {"phases": [Phase.explicit, Phase.reuse, Phase.generate]}  # no shrinking


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


# --- archive verification ------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive_bytes(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        toy.install_toy_kind(mp)
        folder = tmp_path_factory.mktemp("archive")
        archive = seal(toy.build_run_dir(folder / "run"), key=None, sign=False)
        yield archive.read_bytes()


@pytest.fixture
def toy_kind(monkeypatch):
    toy.install_toy_kind(monkeypatch)


def check_verify(path: Path) -> str:
    """The property: 'valid', or 'invalid' (EvidenceError, one line, exit 3)."""
    try:
        with time_limit(VERIFY_SECONDS):
            verify_archive(path)
    except EvidenceError as exc:
        assert_one_line(exc)
        assert exc.exit_code == 3
        return "invalid"
    except Hang as exc:
        raise AssertionError(f"verify_archive hung: {exc}") from None
    except Exception as exc:
        raise AssertionError(f"raw {type(exc).__name__} from verify_archive: {exc!r}") from exc
    return "valid"


@st.composite
def mutated_bytes(draw, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if how == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            del data[at:]
    return bytes(data)


def _header_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of every field of every local header, central entry and the end
    record of a well-formed zip (the archive as written)."""
    fields = []
    local = (4, 2, 2, 2, 2, 2, 4, 4, 4, 2, 2)
    central = (4, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 2, 2, 2, 2, 2, 4, 4)
    end = (4, 2, 2, 2, 2, 4, 4, 2)
    for signature, widths in ((b"PK\x03\x04", local), (b"PK\x01\x02", central)):
        at = data.find(signature)
        while at >= 0:
            offset = at
            for width in widths:
                fields.append((offset, width))
                offset += width
            at = data.find(signature, at + 4)
    offset = len(data) - 22
    for width in end:
        fields.append((offset, width))
        offset += width
    return fields


@st.composite
def mutated_headers(draw, original: bytes) -> bytes:
    data = bytearray(original)
    fields = _header_fields(original)
    for _ in range(draw(st.integers(1, 2))):
        offset, width = draw(st.sampled_from(fields))
        top = (1 << (8 * width)) - 1
        value = draw(
            st.one_of(
                st.sampled_from([0, 1, 8, 0x41, 0x800, 0xFFFF, top, top - 1]),
                st.integers(0, top),
                st.just(int.from_bytes(data[offset : offset + width], "little") ^ 1),
            )
        )
        data[offset : offset + width] = (value & top).to_bytes(width, "little")
    return bytes(data)


def _verify_property(strategy_of, name: str, **extra):
    @profile(name, **extra)
    @given(st.data())
    def run(folder, original, outcomes, data):
        path = folder / "a.zip"
        path.write_bytes(data.draw(strategy_of(original)))
        outcomes.append(check_verify(path))

    return run


def test_mutated_archive_bytes_verify_or_fail_in_one_line(scratch, archive_bytes, toy_kind):
    outcomes: list[str] = []
    _verify_property(mutated_bytes, "bytes")(scratch, archive_bytes, outcomes)
    _summary("mutated archive bytes", outcomes)
    assert "invalid" in outcomes


def test_mutated_archive_headers_verify_or_fail_in_one_line(scratch, archive_bytes, toy_kind):
    outcomes: list[str] = []
    _verify_property(mutated_headers, "headers")(scratch, archive_bytes, outcomes)
    _summary("mutated archive headers", outcomes)
    assert "invalid" in outcomes
    # The control of the control: the unmutated archive verifies.
    (scratch / "a.zip").write_bytes(archive_bytes)
    assert check_verify(scratch / "a.zip") == "valid"


def test_control_a_raw_exception_from_the_reader_fails_the_property(
    scratch, archive_bytes, toy_kind, monkeypatch
):
    from specconform.evidence import verify as verify_module

    def broken(path):
        raise struct.error("planted: unpack requires a buffer of 46 bytes")

    monkeypatch.setattr(verify_module, "read_archive", broken)
    with pytest.raises(AssertionError, match="raw error"):
        _verify_property(mutated_headers, "control", **CONTROL)(scratch, archive_bytes, [])


def test_control_a_multi_line_evidence_error_fails_the_property(
    scratch, archive_bytes, toy_kind, monkeypatch
):
    from specconform.evidence import verify as verify_module

    def broken(path):
        raise EvidenceError("planted\nsecond line")

    monkeypatch.setattr(verify_module, "_verify_archive", lambda *a, **k: broken(a[0]))
    monkeypatch.setattr(verify_module, "one_line", lambda exc: exc)
    with pytest.raises(AssertionError, match="not one line"):
        _verify_property(mutated_bytes, "control", **CONTROL)(scratch, archive_bytes, [])


# --- a few through the real CLI -------------------------------------------------------------


def _cli_examples(strategy, count: int) -> list[bytes]:
    """`count` examples of `strategy`, the same on every run (seeded)."""
    found: list[bytes] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None)
    @given(strategy)
    def collect(value):
        found.append(value)

    collect()
    rng = random.Random(37)
    return rng.sample(found, min(count, len(found)))


def test_cli_protocol_refusals_are_one_line_exit_2(tmp_path):
    # --seeds 0 is out of range for every kind (or not overridable): exit 2 even when
    # the mutated file loads, so no engine ever starts.
    for i, data in enumerate(_cli_examples(mutated_protocols(), 2)):
        path = tmp_path / f"p{i}.yaml"
        path.write_bytes(data)
        result = run_cli("run", path, "--seeds", "0", "--out", tmp_path / "out", "--no-sign")
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "out").exists()


def test_cli_verify_of_mutated_archives_is_one_line(tmp_path, archive_bytes):
    rng = random.Random(374)
    fields = _header_fields(archive_bytes)
    for i in range(2):
        data = bytearray(archive_bytes)
        offset, width = rng.choice(fields)
        data[offset : offset + width] = bytes(rng.randrange(256) for _ in range(width))
        path = tmp_path / f"a{i}.zip"
        path.write_bytes(bytes(data))
        result = run_cli("verify", path, "--skip-signature")
        lines = result.stderr.splitlines()
        assert "Traceback" not in result.stderr
        # The subprocess has no toy kind: a structurally intact archive fails at the
        # recomputation instead, which is exit 3 with one line too.
        assert result.returncode == 3 and len(lines) == 1, result.stderr
