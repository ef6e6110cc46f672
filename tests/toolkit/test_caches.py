"""The persistent kernel cache (specconform/runner/caches.py): Triton's cache goes under
``<out>/.cache/triton`` unless the user set one, and nothing is created up front."""

from __future__ import annotations

import os

from specconform.runner.caches import use_persistent_caches


def test_triton_cache_defaults_under_the_out_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    use_persistent_caches(tmp_path / "reports")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path.resolve() / "reports/.cache/triton")
    assert not (tmp_path / "reports").exists()  # Triton creates it when it compiles


def test_a_cache_the_user_chose_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/else")
    use_persistent_caches(tmp_path)
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/else"
