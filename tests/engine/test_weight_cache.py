"""The on-disk memo of seeded weights (engine_under_test/model/weight_cache.py): a cached
build equals a fresh one tensor for tensor, a damaged entry is rebuilt, and the key
separates configurations and dtypes. Deterministic: no alpha or power applies."""

from __future__ import annotations

import pytest
import torch

from engine_under_test import ModelConfig
from engine_under_test.model import build_model, weight_cache
from specconform.runner.caches import WEIGHT_CACHE_ENV


def _equal(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _entries(folder):
    return sorted(p.name for p in folder.glob("*.pt"))


def test_toolkit_and_engine_name_the_same_variable():
    assert WEIGHT_CACHE_ENV == weight_cache.ENV


def test_a_cached_build_equals_a_fresh_one(tmp_path, monkeypatch):
    cfg = ModelConfig.preset("tiny", seed=3)
    fresh = {dt: build_model(cfg, dtype=dt) for dt in (torch.float32, torch.bfloat16)}
    monkeypatch.setenv(weight_cache.ENV, str(tmp_path))
    for dt, want in fresh.items():
        first = build_model(cfg, dtype=dt)  # builds and writes the entry
        second = build_model(cfg, dtype=dt)  # loads it
        assert _equal(first, want) and _equal(second, want)
        assert second.embed_tokens.weight.dtype == dt
    assert len(_entries(tmp_path)) == 2  # one per dtype
    assert len(list(tmp_path.glob("*.sha256"))) == 2
    assert not list(tmp_path.glob(".*tmp"))  # no temporary left behind


def test_the_load_path_is_taken(tmp_path, monkeypatch):
    """The second build really comes from the file: an entry rewritten with other
    weights (and a matching digest) is what it returns -- which is why the key, not the
    digest, is what separates configurations."""
    monkeypatch.setenv(weight_cache.ENV, str(tmp_path))
    cfg, other = ModelConfig.preset("tiny", seed=0), ModelConfig.preset("tiny", seed=1)
    build_model(cfg), build_model(other)
    key, other_key = (weight_cache.cache_key(c, torch.float32) for c in (cfg, other))
    assert key != other_key
    for suffix in (".pt", ".sha256"):
        (tmp_path / f"{key}{suffix}").write_bytes((tmp_path / f"{other_key}{suffix}").read_bytes())
    assert _equal(build_model(cfg), build_model(other))
    monkeypatch.setenv(weight_cache.ENV, "")
    assert not _equal(build_model(cfg), build_model(other))


def test_a_damaged_entry_is_rebuilt(tmp_path, monkeypatch, capsys):
    cfg = ModelConfig.preset("tiny", seed=0)
    want = build_model(cfg)
    monkeypatch.setenv(weight_cache.ENV, str(tmp_path))
    build_model(cfg)
    (entry,) = tmp_path.glob("*.pt")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert _equal(build_model(cfg), want)
    assert "unusable (sha256 mismatch); rebuilding it" in capsys.readouterr().err
    entry.write_bytes(b"")  # truncated, digest rewritten to match: torch.load fails
    (tmp_path / f"{entry.stem}.sha256").write_text(weight_cache._file_digest(entry))
    assert _equal(build_model(cfg), want)
    assert "rebuilding it" in capsys.readouterr().err
    assert _equal(build_model(cfg), want) and capsys.readouterr().err == ""  # whole again


def test_the_digest_covers_every_byte_of_every_piece(tmp_path, monkeypatch):
    """The piecewise digest (pieces of 1 KiB here: five whole pieces and a partial one)
    changes with any flipped byte, in any piece, and with the file's length."""
    monkeypatch.setattr(weight_cache, "PIECE", 1024)
    data = bytes(range(256)) * 21  # 5,376 bytes
    original, copy = tmp_path / "a", tmp_path / "b"
    original.write_bytes(data)
    copy.write_bytes(data)
    digest = weight_cache._file_digest(original)
    assert weight_cache._file_digest(copy) == digest
    for at in (0, 1023, 1024, 3000, len(data) - 1):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        copy.write_bytes(bytes(flipped))
        assert weight_cache._file_digest(copy) != digest, at
    copy.write_bytes(data + b"\0")
    assert weight_cache._file_digest(copy) != digest
    (tmp_path / "empty").write_bytes(b"")
    assert weight_cache._file_digest(tmp_path / "empty") != digest


def test_the_key_follows_the_configuration_dtype_and_code(monkeypatch):
    tiny = ModelConfig.preset("tiny", seed=0)
    key = weight_cache.cache_key(tiny, torch.float32)
    assert key == weight_cache.cache_key(ModelConfig.preset("tiny", seed=0), torch.float32)
    assert key != weight_cache.cache_key(ModelConfig.preset("tiny", seed=1), torch.float32)
    assert key != weight_cache.cache_key(tiny, torch.bfloat16)
    with monkeypatch.context() as m:
        m.setattr(torch, "__version__", "0.0.0")
        assert key != weight_cache.cache_key(tiny, torch.float32)
    with monkeypatch.context() as m:
        m.setattr(weight_cache, "SOURCES", weight_cache.SOURCES[:-1])
        assert key != weight_cache.cache_key(tiny, torch.float32)


def test_no_folder_no_files(tmp_path, monkeypatch):
    monkeypatch.setenv(weight_cache.ENV, "")
    monkeypatch.chdir(tmp_path)
    build_model(ModelConfig.preset("tiny", seed=0))
    assert list(tmp_path.iterdir()) == []


def test_entries_past_the_size_limit_are_not_written(tmp_path, monkeypatch, capsys):
    """ouro-1.4b in fp32 would be 5.6 GB: past ENGINE_UNDER_TEST_WEIGHT_CACHE_MAX_GIB
    (default 2) nothing is written and one line says how to allow it; a bad limit is
    an error naming the variable."""
    cfg = ModelConfig.preset("tiny", seed=0)
    monkeypatch.setenv(weight_cache.ENV, str(tmp_path))
    monkeypatch.setenv(weight_cache.MAX_ENV, "0.0001")  # ~100 KiB: tiny is larger
    want = build_model(cfg)
    assert _entries(tmp_path) == []
    err = capsys.readouterr().err
    assert "not writing" in err and weight_cache.MAX_ENV in err
    monkeypatch.setenv(weight_cache.MAX_ENV, "lots")
    with pytest.raises(ValueError, match=weight_cache.MAX_ENV):
        build_model(cfg)
    monkeypatch.delenv(weight_cache.MAX_ENV)
    assert _equal(build_model(cfg), want) and len(_entries(tmp_path)) == 1


def test_an_unwritable_folder_only_costs_the_cache(tmp_path, monkeypatch, capsys):
    """A cache folder that cannot be created (here: below a file) is one line on
    stderr; the model is built from the seed all the same."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cfg = ModelConfig.preset("tiny", seed=0)
    want = build_model(cfg)
    monkeypatch.setenv(weight_cache.ENV, str(blocker / "weights"))
    assert _equal(build_model(cfg), want)
    assert "could not write" in capsys.readouterr().err
