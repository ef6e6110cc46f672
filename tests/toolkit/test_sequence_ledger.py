"""The seed ledger covers sequence runs: a second clean run of the same seeds into the
same --out is refused (exit 2, one line naming the earlier run and the next free
--offset); a run that fails during collection gives its seeds back; --resume stays a
distribution option. (How mutant runs and expansions are treated is the ledger's own,
shared with distribution runs: tests/toolkit/test_ledger.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.toolkit.cli_helpers import run_cli
from tests.toolkit.fixtures.sequence_run import TINY_CPU_ENGINE

# One async group of 3 requests and a nospec one of 2, a few tokens each: the ledger is
# under test, not the statistics (the PIT test has too few tokens: "no evidence", so the
# verdict is INCONCLUSIVE, exit 7 -- an archive all the same, and a clean run's seeds).
PROTOCOL = {
    "kind": "sequence",
    "name": "seq_ledger",
    "alpha": 0.01,
    "engine": {**TINY_CPU_ENGINE, "max_tokens": 6},
    "prompts": ["default"],
    "seeds": {"count": 3, "offset": 100},
    "pit_seed": 1,
    "groups": [
        {"name": "spec", "mode": "async", "draft_loops": 2, "max_num_seqs": 3},
        {"name": "plain", "mode": "nospec", "requests": 2, "seed_offset": 10},
    ],
    "tests": [{"name": "pit", "type": "pit_uniformity", "role": "primary"}],
}


def _protocol(tmp_path: Path, **engine) -> Path:
    data = json.loads(json.dumps(PROTOCOL))
    data["engine"].update(engine)
    path = tmp_path / "seq_ledger.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _ledger(out: Path) -> list[dict]:
    path = out / "seed-ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _run(protocol: Path, out: Path, *extra):
    return run_cli("run", protocol, "--no-sign", "--out", out, *extra)


def test_a_second_run_of_the_same_seeds_is_refused(tmp_path):
    protocol, out = _protocol(tmp_path), tmp_path / "out"
    first = _run(protocol, out)
    assert first.returncode in (0, 1, 7), first.stderr
    entries = _ledger(out)
    ranges = {e["group"]: (e["start"], e["stop"]) for e in entries}
    # offset + seed_offset + [0, requests): 3 requests of "spec", 2 of "plain".
    assert ranges == {"spec": (100, 103), "plain": (110, 112)}
    assert {e["mutant"] for e in entries} == {None}

    again = _run(protocol, out)
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    # The next offset that frees every group: 103 (spec [103, 106), plain [113, 115)).
    assert len(lines) == 1 and "overlap" in lines[0] and "--offset 103" in lines[0], lines
    assert "--resume" not in lines[0] and "expansion" not in lines[0]  # neither applies
    assert len(list(out.glob("*.zip"))) == 1  # nothing written by the refused run

    assert len(_ledger(out)) == 2


def test_a_run_that_fails_in_collection_gives_its_seeds_back(tmp_path):
    protocol = _protocol(tmp_path, adapter="tests.toolkit.test_sequence_ledger:broken")
    out = tmp_path / "out"
    failed = _run(protocol, out)
    assert failed.returncode != 0 and "engine broke" in failed.stderr
    assert _ledger(out) == []  # reserved during the run, released when it failed
    assert not list(out.glob("*.zip"))


def test_resume_is_refused_for_a_sequence_protocol(tmp_path):
    got = _run(_protocol(tmp_path), tmp_path / "out", "--resume", tmp_path)
    assert got.returncode == 2
    assert "--resume applies to distribution protocols, not sequence" in got.stderr


def broken(spec, *, mutant=None, log=print):
    """The bundled engine whose generation raises (a crash mid-collection)."""
    from specconform.adapters.bundled import BundledEngine

    engine = BundledEngine(spec, mutant=mutant, log=log)

    def run_requests(*args, **kwargs):
        raise RuntimeError("engine broke")

    engine.run_requests = run_requests  # type: ignore[method-assign]
    return engine
