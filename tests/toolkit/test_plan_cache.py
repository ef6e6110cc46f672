"""The reference-law cache of `specconform plan` (specconform.planning.law_cache, issue 38):
a hit gives the same plan without replaying, a corrupted entry is recomputed after one
warning, and the key moves with everything the laws depend on. Deterministic (no
statistics): the toy numpy engine's laws (examples/my_adapter.py) replayed through replay_laws."""

from __future__ import annotations

import json

import pytest

import specconform.adapters.engine as adapters_engine
from specconform.planning import law_cache
from specconform.protocol.load import load_protocol
from specconform.runner.replay import replay_laws
from tests.toolkit.cli_helpers import ROOT, run_cli

# The toy numpy engine's protocol: its replay takes milliseconds (the bundled tiny
# preset's took 90 s on the loaded 2-core CPU); replay_laws is the same code for both.
TOY = ROOT / "examples/my_adapter.yaml"
GATE = ROOT / "protocols/ci_gate.yaml"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "laws"
    monkeypatch.setenv(law_cache.CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def builds(monkeypatch):
    """Counts engine builds: a replay builds one, a cache hit none."""
    calls = []
    real = adapters_engine.load_engine

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(adapters_engine, "load_engine", counting)
    return calls


def _changed(tmp_path, old: str, new: str, source=None):
    text = (source or TOY).read_text()
    assert old in text
    path = tmp_path / "changed.yaml"
    path.write_text(text.replace(old, new, 1))
    return load_protocol(path)


def test_cli_second_plan_reads_the_cache_and_prints_the_same_plan(cache):
    first = run_cli("plan", TOY, "--seeds", "3000", env={law_cache.CACHE_ENV: str(cache)})
    assert first.returncode == 0, first.stderr
    # Progress while it replays (plain lines in CI), then where the laws were kept.
    assert "reference laws:" in first.stderr and "100%" in first.stderr
    assert "reference laws cached in" in first.stderr
    assert len(list(cache.glob("*.json"))) == 1
    second = run_cli("plan", TOY, "--seeds", "3000", env={law_cache.CACHE_ENV: str(cache)})
    assert second.returncode == 0, second.stderr
    assert "reference laws from the cache" in second.stderr
    assert "building the engine" not in second.stderr  # no replay at all
    assert second.stdout == first.stdout and "t2_sync" in second.stdout


def test_hit_returns_the_replayed_laws_exactly(cache, builds):
    loaded = load_protocol(TOY)
    replayed = replay_laws(loaded, notify=lambda line: None)
    assert len(builds) == 1
    lines: list[str] = []
    hit = replay_laws(loaded, notify=lines.append)
    assert len(builds) == 1, "a hit must not build an engine"
    assert hit == replayed  # floats round-trip through JSON exactly
    assert any("from the cache" in line for line in lines)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # a torn write
        lambda b: b"\x00" * 64,
        # Valid JSON naming another key (a file copied over): not these laws.
        lambda b: json.dumps({**json.loads(b), "key": {"protocol_sha256": "0"}}).encode(),
        lambda b: json.dumps({"key": json.loads(b)["key"], "laws": {}}).encode(),
    ],
    ids=["truncated", "garbage", "other-key", "no-laws"],
)
def test_corrupted_entry_is_recomputed_after_one_warning(cache, builds, damage):
    loaded = load_protocol(TOY)
    replayed = replay_laws(loaded, notify=lambda line: None)
    (entry,) = cache.glob("*.json")
    entry.write_bytes(damage(entry.read_bytes()))
    lines: list[str] = []
    again = replay_laws(loaded, notify=lines.append)
    warnings = [line for line in lines if "ignoring a corrupted" in line]
    assert len(warnings) == 1 and str(entry) in warnings[0]
    assert len(builds) == 2  # recomputed ...
    assert again == replayed
    lines.clear()
    assert replay_laws(loaded, notify=lines.append) == replayed  # ... and the entry repaired
    assert len(builds) == 2 and not [line for line in lines if "ignoring a corrupted" in line]


def test_key_moves_with_what_determines_the_laws(tmp_path):
    loaded = load_protocol(GATE)  # the bundled engine's key (no replay needed)
    engine = loaded.model.engine.model_dump(mode="json")

    def key(protocol=loaded, eng=engine, depths=(1, 2), torch="2.11.0"):
        return law_cache.law_key(protocol.hash, eng, depths, torch).digest()

    base = key()
    assert key() == base  # deterministic
    assert key(protocol=_changed(tmp_path, "temperature: 1.0", "temperature: 0.9", GATE)) != base
    assert (
        key(
            protocol=_changed(
                tmp_path, "CI-sized distribution gate", "A CI-sized distribution gate", GATE
            )
        )
        != base
    )
    assert key(eng={**engine, "device": "cuda"}) != base
    assert key(eng={**engine, "dtype": "bfloat16"}) != base
    assert key(depths=(2,)) != base
    assert key(torch="2.12.0") != base
    # The batch size changes no law: a run's --batch-size shares the plan's entry.
    assert key(eng={**engine, "batch_size": 7}) == base


def test_code_digest_moves_with_the_engine_source(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = law_cache.source_digest(["fake_engine_pkg"])
    assert law_cache.source_digest(["fake_engine_pkg"]) == before
    (pkg / "model.py").write_text("SCALE = 1.5\n")
    assert law_cache.source_digest(["fake_engine_pkg"]) != before
    # A user's factory names its package: the key digests that package's sources.
    k1 = law_cache.law_key("h", {"adapter": "fake_engine_pkg.model:factory"}, (1,), "t")
    (pkg / "model.py").write_text("SCALE = 2.0\n")
    k2 = law_cache.law_key("h", {"adapter": "fake_engine_pkg.model:factory"}, (1,), "t")
    assert k1.code_sha256 != k2.code_sha256


def test_changed_protocol_misses_and_replays(cache, builds, tmp_path):
    replay_laws(load_protocol(TOY), notify=lambda line: None)
    changed = _changed(tmp_path, "temperature: 1.0", "temperature: 0.9")
    laws = replay_laws(changed, notify=lambda line: None)
    assert len(builds) == 2 and len(list(cache.glob("*.json"))) == 2
    assert laws["p_t1"] != replay_laws(load_protocol(TOY), notify=lambda line: None)["p_t1"]


def test_unwritable_folder_warns_and_still_plans(tmp_path, monkeypatch, builds):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(law_cache.CACHE_ENV, str(blocker / "laws"))
    lines: list[str] = []
    laws = replay_laws(load_protocol(TOY), notify=lines.append)
    assert laws["p_t1"] and any("could not cache" in line for line in lines)
