"""Reading a protocol file as hostile input: bounded read, bounded YAML.

`read_protocol_bytes` opens only regular files (a FIFO, a device such as /dev/zero or a
directory is refused before anything is read: /dev/zero used to hang) and reads at most
MAX_PROTOCOL_BYTES + 1 bytes. `parse_yaml` is PyYAML's safe loader (libyaml's parser when
available) with limits checked while the document is composed, before any Python
object is built:

- nesting depth at most MAX_DEPTH, counted through aliases (deep nesting was a
  RecursionError);
- at most MAX_NODES values, counted as they are composed, an alias counting as the
  values it names, and no alias to a node that contains it (billion-laughs documents
  and self-referencing aliases are refused instead of being expanded by validation);
- at most MAX_ALIASES aliases;
- numbers at most MAX_NUMBER_CHARS characters (Python refuses int literals of more than
  4,300 digits, and YAML 1.1 sexagesimal integers cost quadratic time);
- no mapping key twice at any level (a second ``alpha:`` silently replaced the first):
  the error names the key and both lines.

Every refusal raises `YamlRefused` with a one-line message (line numbers 1-based).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

# A protocol is a page of YAML (the largest shipped one is 13 KB); 1 MiB leaves room for
# an explicit law over the largest vocabulary and refuses anything that is not a protocol.
MAX_PROTOCOL_BYTES = 1 << 20
# Real protocols nest five levels deep (protocol > groups > group > sampling > entry).
MAX_DEPTH = 32
# Values in the document, counted as they are composed, every alias counting as the
# values it names (so aliases cannot multiply a document: billion laughs). 2**17 admits
# explicit laws p and q over Ouro's vocabulary of 49,152 (larger vocabularies take a
# seeded random law); composing and validating that many takes a few seconds at most.
MAX_NODES = 1 << 17
MAX_ALIASES = 1024
# An int64 is 20 characters, a float's repr at most 24; room for signs and underscores.
MAX_NUMBER_CHARS = 64

_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlRefused(Exception):
    """A protocol file refused before or while parsing; the message is one line."""


def read_protocol_bytes(path: Path) -> bytes:
    """The file's bytes, if it is a regular file of at most MAX_PROTOCOL_BYTES."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise YamlRefused(f"cannot read protocol file: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise YamlRefused(f"cannot read protocol file: {exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise YamlRefused(f"{what}: a protocol must be a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(MAX_PROTOCOL_BYTES + 1)
        except OSError as exc:
            raise YamlRefused(f"cannot read protocol file: {exc.strerror or exc}") from None
    if len(data) > MAX_PROTOCOL_BYTES:
        raise YamlRefused(
            f"larger than {MAX_PROTOCOL_BYTES >> 20} MiB: a protocol file is at most "
            f"{MAX_PROTOCOL_BYTES} bytes"
        )
    return data


def _line(node: Node) -> int:
    return node.start_mark.line + 1


class _BoundedComposer(Composer):
    """Composer that measures every node as it is composed: depth and expanded size are
    computed from the children's (already known) values, so nothing recurses over an
    expanded document and an alias costs its referent's size."""

    def _init_bounds(self) -> None:
        self._depth = 0
        self._aliases = 0
        self._total = 0  # values composed so far, aliases expanded
        self._open: set[str] = set()  # anchors of the nodes being composed (ancestors)
        self._size: dict[int, int] = {}
        self._height: dict[int, int] = {}

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlRefused(f"more than {MAX_ALIASES} aliases (line {line})")
            if event.anchor in self._open:
                raise YamlRefused(
                    f"alias *{event.anchor} refers to a node that contains it (line {line})"
                )
            node = super().compose_node(parent, index)
            self._check_height(self._depth + self._height[id(node)], line)
            self._count(self._size[id(node)], line)
            return node
        self._count(1, line)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels (line {line})")
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)
            self._depth -= 1
        self._measure(node)
        return node

    def compose_mapping_node(self, anchor):
        """The mapping, refused if a key appears twice (as Python keys: ``1`` and
        ``0x1`` are one key). Scalar keys are built here with the constructor's own rules,
        before any merge (``<<``) is applied: keys a merge brings may be overridden."""
        node = super().compose_mapping_node(anchor)
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # collection keys: refused by the constructor as unhashable
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            try:
                first = seen.get(key)
            except TypeError:
                continue
            if first is not None:
                raise YamlRefused(
                    f"duplicate key {_show(key)} (lines {first} and {_line(key_node)})"
                )
            seen[key] = _line(key_node)
        return node

    def _measure(self, node: Node) -> None:
        if isinstance(node, ScalarNode):
            if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
                raise YamlRefused(
                    f"number of {len(node.value)} characters (line {_line(node)}); "
                    f"at most {MAX_NUMBER_CHARS}"
                )
            kids: list[Node] = []
        elif isinstance(node, SequenceNode):
            kids = node.value
        else:
            kids = [n for pair in node.value for n in pair]
        size = 1 + sum(self._size[id(k)] for k in kids)
        height = 1 + max((self._height[id(k)] for k in kids), default=0)
        self._size[id(node)], self._height[id(node)] = size, height
        self._check_height(self._depth + height, _line(node))

    def _count(self, values: int, line: int) -> None:
        self._total += values
        if self._total > MAX_NODES:
            raise YamlRefused(
                f"more than {MAX_NODES} values once aliases are expanded (line {line})"
            )

    def _check_height(self, depth: int, line: int) -> None:
        if depth > MAX_DEPTH:
            raise YamlRefused(
                f"nested deeper than {MAX_DEPTH} levels once aliases are expanded (line {line})"
            )


def _show(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


class _Loader(Reader, Scanner, Parser, _BoundedComposer, SafeConstructor, Resolver):
    def __init__(self, stream) -> None:  # noqa: ANN001
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._init_bounds()


try:  # libyaml's scanner and parser, when PyYAML was built with it
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover (pure-Python PyYAML)
    _CParser = None
if _CParser is not None:

    class _FastLoader(_BoundedComposer, _CParser, SafeConstructor, Resolver):  # type: ignore[misc, valid-type]
        """libyaml scans and parses (pure Python takes a minute for 1 MiB); the bounded
        composer above still builds every node from libyaml's events."""

        def __init__(self, stream) -> None:  # noqa: ANN001
            _CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._init_bounds()


def parse_yaml(source: bytes, *, fast: bool = True):
    """The document in `source`, parsed under the limits above. Raises YamlRefused for
    a limit or a duplicate key, yaml.YAMLError for malformed YAML."""
    loader = _FastLoader(source) if fast and _CParser is not None else _Loader(source)
    try:
        return loader.get_single_data()
    except ValueError as exc:
        # Python's own limit on int literals (4,300 digits) and similar value errors
        # of scalar conversion.
        raise YamlRefused(f"a value cannot be read: {exc}") from None
    finally:
        loader.dispose()
