"""Fixtures shared by the toolkit's tests: the toy kind and a key pair (evidence tests),
the exact synthetic world of seed 0 and its Reference (distribution tests)."""

from __future__ import annotations

import pytest

from specconform.calibration import make_world
from specconform.cli.evidence import write_key_pair
from specconform.kinds.distribution import Reference
from tests.toolkit.fixtures import evidence_toy as toy


@pytest.fixture
def toy_kind(monkeypatch):
    """The toy kind (fixtures/evidence_toy.py) registered for one test."""
    toy.install_toy_kind(monkeypatch)


@pytest.fixture
def keys(tmp_path):
    """A fresh signing key pair under tmp_path/keys ("good")."""
    (tmp_path / "keys").mkdir()
    return write_key_pair(tmp_path / "keys" / "good")


@pytest.fixture(scope="module")
def world():
    return make_world(0)


@pytest.fixture(scope="module")
def ref(world):
    return Reference(world.reference)
