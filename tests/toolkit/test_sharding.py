"""Seed sharding over torch.distributed (issue 17): the same evidence from 1, 2 and 4
Gloo processes, resumable after a rank is killed, refused before any work when a rank
cannot run.

Deterministic: the tiny preset on CPU, fixed seeds; no statistics are asserted here, only
byte equality of raw data and results (the statistics are the protocol's own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specconform.runner.sharding import EXIT_INCOMPLETE, Shard, current_shard
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT, run_cli

CI_GATE = ROOT / "protocols" / "ci_gate.yaml"
# Everything but the environment manifest (world size), volatile.json and the digests
# of those two (SHA256SUMS, attestation) must be byte-identical for any process count.
INVARIANT = (
    "raw/samples.csv",
    "raw/reference.json",
    "results/tests.json",
    "results/tests.csv",
    "verdict.json",
    "protocol.json",
    "protocol.yaml",
)


def _protocol(tmp_path: Path, seeds: int = 120, batch: int = 40) -> Path:
    """Two groups of the CI gate, cut to a few small batches (6 in all)."""
    data = yaml.safe_load(CI_GATE.read_text())
    data["name"] = "shard_probe"
    data["seeds"]["count"] = seeds
    data["engine"]["batch_size"] = batch
    data["groups"] = [g for g in data["groups"] if g["name"] in ("nospec", "async")]
    data["tests"] = [t for t in data["tests"] if set(t["groups"]) <= {"nospec", "async"}]
    data["strata"]["min_samples"] = 20
    path = tmp_path / "shard_probe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run_dir(out: Path) -> Path:
    return next(p for p in out.iterdir() if (p / "verdict.json").exists())


def test_shard_owns_batches_round_robin():
    shards = [Shard(r, 3, r) for r in range(3)]
    owners = [[s.rank for s in shards if s.owns(i)] for i in range(7)]
    assert owners == [[0], [1], [2], [0], [1], [2], [0]]  # each batch exactly once
    assert Shard().owns(5) and not Shard().distributed


def test_current_shard_reads_torchrun_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert current_shard() == Shard()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert current_shard() == Shard(1, 2, 1)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(UsageError, match="not in"):
        current_shard()


def test_two_and_four_processes_give_the_one_process_archive(tmp_path):
    protocol = _protocol(tmp_path)
    one = run_cli("run", protocol, "--out", tmp_path / "n1", "--no-sign")
    assert one.returncode in (0, 1), one.stderr
    whole = _run_dir(tmp_path / "n1")
    for n in (2, 4):
        out = tmp_path / f"n{n}"
        res = run_cli("run", protocol, "--out", out, "--no-sign", "--nproc", n)
        assert res.returncode == one.returncode, res.stderr[-2000:]
        assert "result: " in res.stdout and res.stdout.count("result: ") == 1  # leader only
        sharded = _run_dir(out)
        for name in INVARIANT + ("run.json", "log.txt"):
            assert (whole / name).read_bytes() == (sharded / name).read_bytes(), (n, name)
        env = json.loads((sharded / "environment.json").read_text())
        assert env["world_size"] == n
        # The ledger is written once, by the leader, with each group's whole range.
        ledger = [json.loads(line) for line in (out / "seed-ledger.jsonl").read_text().splitlines()]
        assert sorted(e["group"] for e in ledger) == ["async", "nospec"]
        assert not list(out.glob("*.inprogress"))


def test_killed_rank_ends_the_run_and_resume_with_one_process_completes_it(tmp_path):
    protocol = _protocol(tmp_path, seeds=240, batch=40)  # 12 batches, 6 per rank
    one = run_cli("run", protocol, "--out", tmp_path / "n1", "--no-sign")
    assert one.returncode in (0, 1), one.stderr
    out = tmp_path / "killed"
    # Rank 1 kills itself with SIGKILL right after writing its first batch (the test-only
    # hook of runner/interrupt.py): the run is mid-way at the same point on any machine,
    # with no polling of the checkpoint and no race with the other rank.
    env = {"SPECCONFORM_TEST_INTERRUPT": "1:SIGKILL:1"}
    killed = run_cli("run", protocol, "--out", out, "--no-sign", "--nproc", "2", env=env)
    assert killed.returncode == EXIT_INCOMPLETE, killed.stderr[-2000:]
    assert "did not finish" in killed.stderr and "--resume" in killed.stderr
    folders = list(out.glob("*.inprogress"))
    assert len(folders) == 1 and not list(out.glob("*.zip"))  # no partial archive
    # Batch 1 of the plan (nospec seeds 1000040..79) is rank 1's first: it is on disk.
    assert (folders[0] / "batches" / "nospec-1000040.csv").exists()
    resumed = run_cli("run", protocol, "--out", out, "--no-sign", "--resume", folders[0])
    assert resumed.returncode == one.returncode, resumed.stderr
    whole, done = _run_dir(tmp_path / "n1"), _run_dir(out)
    for name in INVARIANT:
        assert (whole / name).read_bytes() == (done / name).read_bytes(), name


def test_a_rank_without_the_device_refuses_before_anything_is_written(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    protocol = _protocol(tmp_path)
    out = tmp_path / "out"
    res = run_cli("run", protocol, "--out", out, "--no-sign", "--nproc", "2", "--device", "cuda")
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rank 0 of 2" in errors[0] and "CUDA" in errors[0]
    assert not out.exists()


def test_kernel_protocols_refuse_sharding(tmp_path):
    res = run_cli(
        "run",
        ROOT / "protocols" / "quadrature.yaml",
        "--out",
        tmp_path / "o",
        "--no-sign",
        "--nproc",
        "2",
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert "only distribution protocols shard" in res.stderr
    assert not (tmp_path / "o").exists()
