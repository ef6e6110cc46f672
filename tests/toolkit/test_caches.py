"""The persistent caches (specconform/runner/caches.py): Triton's kernels and the engine's
weights go under ``<out>/.cache`` unless the user set a folder, and nothing is created
up front."""

from __future__ import annotations

import os

from specconform.runner.caches import use_persistent_caches


def test_triton_cache_defaults_under_the_out_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv("ENGINE_UNDER_TEST_WEIGHT_CACHE", raising=False)
    use_persistent_caches(tmp_path / "reports")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path.resolve() / "reports/.cache/triton")
    assert not (tmp_path / "reports").exists()  # Triton creates it when it compiles


def test_a_cache_the_user_chose_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/else")
    use_persistent_caches(tmp_path)
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/else"


def test_weight_cache_defaults_under_the_out_folder(tmp_path, monkeypatch):
    from specconform.runner.caches import WEIGHT_CACHE_ENV

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv(WEIGHT_CACHE_ENV, raising=False)
    use_persistent_caches(tmp_path / "reports")
    assert os.environ[WEIGHT_CACHE_ENV] == str(tmp_path.resolve() / "reports/.cache/weights")
    assert not (tmp_path / "reports").exists()
    monkeypatch.setenv(WEIGHT_CACHE_ENV, "/mine")
    use_persistent_caches(tmp_path)
    assert os.environ[WEIGHT_CACHE_ENV] == "/mine"
