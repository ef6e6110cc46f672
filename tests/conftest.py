"""Shared pytest configuration: GPU tests skip cleanly on machines without CUDA; no test
builds its model from a weight cache it did not set up."""

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # verify/report environments may lack torch entirely
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _no_weight_cache(monkeypatch):
    """Tests build their models from the seed: ``specconform run`` in-process would
    otherwise point the engine's weight cache (engine_under_test/model/weight_cache.py)
    at a test's output folder for every later test of the worker. An empty value means
    "no cache" and survives ``use_persistent_caches``' setdefault; tests of the cache
    set their own folder."""
    monkeypatch.setenv("ENGINE_UNDER_TEST_WEIGHT_CACHE", "")


@pytest.fixture(autouse=True)
def _own_law_cache(monkeypatch, tmp_path_factory):
    """`specconform plan` keeps replayed reference laws in a user cache folder
    (specconform.planning.law_cache): each test gets its own, empty one, so no test
    reads laws another test (or the developer's own plans) left there."""
    monkeypatch.setenv("SPECCONFORM_LAW_CACHE", str(tmp_path_factory.mktemp("laws")))
