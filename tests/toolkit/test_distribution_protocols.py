"""Distribution protocols end to end on the bundled engine (tiny preset, CPU).

ci_gate is pre-registered at alpha = 0.01 per test; the clean-engine assertion below is
deterministic (fixed seeds) and, by the calibration in docs/calibration.md, a fresh seed
range would falsely fail with probability <= 8 x 0.01. The mutants move the committed law
or the acceptance mechanism by far more than the tests' detection thresholds (see
docs/kill-matrix.md for the observed statistics): at the fixed seeds they fail with
p-values below 1e-10, so these assertions have power ~1 and never flake.
"""

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from tests.toolkit.cli_helpers import ROOT, run_cli

CI_GATE = ROOT / "protocols" / "ci_gate.yaml"


def _verdict(out: Path) -> dict:
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.name.endswith(".inprogress"))
    return json.loads((run_dir / "verdict.json").read_text())


def test_ci_gate_passes_on_the_clean_engine(tmp_path):
    proc = run_cli("run", CI_GATE, "--out", tmp_path, "--no-sign")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "result: PASS" in proc.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    samples = (run_dir / "raw" / "samples.csv").read_text().splitlines()
    assert len(samples) == 1 + 5 * 2000  # every seed of every group kept as raw data
    run = json.loads((run_dir / "run.json").read_text())
    assert run["seed_ranges"]["nospec"] == [1_000_000, 1_002_000]
    assert not list(tmp_path.glob("*.inprogress"))  # checkpoint removed after success


@pytest.mark.parametrize(
    "mutant, must_fail",
    [
        ("greedy_draft", "t2_async"),  # committed law moves: a distribution failure
        ("residual_from_p", "joint_async"),  # kernel bug reached through the engine
        ("no_draft_probs", "acceptance_async"),  # law exact, acceptance drops: mechanism only
        # The stale input reaches the round after t2's: t3 leaves the target's support.
        ("async_stale_input", "out_of_support"),
    ],
)
def test_ci_gate_fails_on_planted_bugs(tmp_path, mutant, must_fail):
    proc = run_cli("run", CI_GATE, "--mutant", mutant, "--out", tmp_path, "--no-sign")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    verdict = _verdict(tmp_path)
    assert verdict["verdict"] == "FAIL" and must_fail in verdict["failed"]
    if mutant == "no_draft_probs":
        run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
        rows = {r["test"]: r for r in json.loads((run_dir / "results/tests.json").read_text())}
        assert rows["t2_async"]["passed"] and rows["t2_async_vs_nospec"]["passed"]


def test_engine_errors_fail_the_verdict_as_engine_errors(tmp_path):
    """Issue 13: one NaN target law in the first decode round (the planted fault
    `nan_target_once`) fails its round's requests; the run must FAIL with "engine
    errors" named, never PASS on a silently smaller sample. Deterministic: the rule
    (tolerance 0) cannot false-fail a correct engine, and the fault always fires."""
    protocol = _small_protocol(tmp_path, seeds=200, batch=100)
    proc = run_cli(
        "run", protocol, "--mutant", "nan_target_once", "--out", tmp_path / "o", "--no-sign"
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    verdict = _verdict(tmp_path / "o")
    assert verdict["verdict"] == "FAIL" and "engine_errors" in verdict["failed"]
    assert verdict["reasons"]["engine_errors"] == "engine errors"
    run_dir = next(p for p in (tmp_path / "o").iterdir() if p.is_dir())
    rows = {r["test"]: r for r in json.loads((run_dir / "results/tests.json").read_text())}
    assert rows["engine_errors"]["statistic"] > 0  # the count of failed requests
    verified = run_cli("verify", next((tmp_path / "o").glob("*.zip")), "--skip-signature")
    assert verified.returncode == 0, verified.stderr  # the rule is recomputed from raw data


def test_overlapping_seed_ranges_are_refused(tmp_path):
    small = _small_protocol(tmp_path, seeds=300, batch=300)
    first = run_cli("run", small, "--out", tmp_path / "out", "--no-sign")
    assert first.returncode in (0, 1), first.stderr
    again = run_cli("run", small, "--out", tmp_path / "out", "--no-sign", "--offset", "100")
    assert again.returncode == 2
    assert "overlap" in again.stderr and "earlier run" in again.stderr
    assert again.stderr.count("\n") == 1
    disjoint = run_cli("run", small, "--out", tmp_path / "out", "--no-sign", "--offset", "300")
    assert disjoint.returncode in (0, 1), disjoint.stderr


def _small_protocol(tmp_path: Path, seeds: int, batch: int) -> Path:
    data = yaml.safe_load(CI_GATE.read_text())
    data["name"] = "ci_gate_small"
    data["seeds"]["count"] = seeds
    data["engine"]["batch_size"] = batch
    data["strata"]["min_samples"] = 50
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_resume_after_kill_gives_identical_counts_and_verdict(tmp_path):
    """Interrupt a real run with SIGKILL, SIGINT and SIGKILL again, resume each time, and
    compare with an uninterrupted run: same samples byte for byte, same tests, same
    verdict. No seed lost, none counted twice.

    The run signals itself after a given number of its own batch files
    (SPECCONFORM_TEST_INTERRUPT, runner/interrupt.py), so each interruption lands at the
    same point on an idle or a loaded machine: after 4, 4 + 10 and 4 + 10 + 10 of the 40
    batches. No polling, no sleeps, no race with the run."""
    protocol = _small_protocol(tmp_path, seeds=400, batch=50)  # 40 checkpointed batches
    reference = run_cli("run", protocol, "--out", tmp_path / "whole", "--no-sign")
    assert reference.returncode in (0, 1), reference.stderr

    out = tmp_path / "killed"
    args = ("run", protocol, "--out", out, "--no-sign")
    folder = None
    for n, (after, sig, code) in enumerate(
        ((4, "SIGKILL", -9), (10, "SIGINT", 130), (10, "SIGKILL", -9))
    ):
        resume = ("--resume", folder) if folder else ()
        env = dict(os.environ, SPECCONFORM_TEST_INTERRUPT=f"{after}:{sig}")
        # SIGINT's default disposition in the child whatever the parent's: a shell that
        # starts pytest in the background ignores SIGINT, the child inherits that, and
        # Python then never turns SIGINT into KeyboardInterrupt.
        stopped = run_cli(*args, *resume, env=env, preexec_fn=_default_sigint)
        assert stopped.returncode == code, (n, stopped.stderr[-2000:])
        if sig == "SIGINT":
            assert "interrupted: continue with --resume" in stopped.stderr
        (folder,) = out.glob("*.inprogress")
        assert len(list((folder / "batches").glob("*.csv"))) == 4 + 10 * n
    done = run_cli(*args, "--resume", folder)
    assert done.returncode == reference.returncode, done.stderr[-2000:]

    whole = next(p for p in (tmp_path / "whole").iterdir() if (p / "verdict.json").exists())
    resumed = next(p for p in out.iterdir() if (p / "verdict.json").exists())
    for name in ("raw/samples.csv", "raw/reference.json", "results/tests.json", "verdict.json"):
        assert (whole / name).read_bytes() == (resumed / name).read_bytes(), name
    assert not list(out.glob("*.inprogress"))


def test_interrupt_hook_refuses_a_malformed_value(tmp_path):
    """The test-only hook fails loudly on a typo rather than silently never firing."""
    protocol = _small_protocol(tmp_path, seeds=100, batch=50)
    env = dict(os.environ, SPECCONFORM_TEST_INTERRUPT="4:SIGNOPE")
    res = run_cli("run", protocol, "--out", tmp_path / "out", "--no-sign", env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "SPECCONFORM_TEST_INTERRUPT" in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.inprogress"))


def test_resume_refuses_a_different_protocol(tmp_path):
    protocol = _small_protocol(tmp_path, seeds=100, batch=50)
    folder = tmp_path / "out" / "x.inprogress"
    folder.mkdir(parents=True)
    (folder / "checkpoint.json").write_text(
        json.dumps(
            {
                "run_id": "x",
                "attempt": "x@1",
                "protocol_hash": "0" * 64,
                "overrides": {},
                "mutant": None,
                "plan": [],
            }
        )
    )
    proc = run_cli("run", protocol, "--resume", folder, "--no-sign")
    assert proc.returncode == 2 and "protocol_hash differs" in proc.stderr


def test_adapter_keeps_one_generation_engine_alive(capsys, monkeypatch):
    """At thousands of concurrent requests each group's engine holds tens of GiB of KV
    and graphs: switching group configuration frees the previous engine, and close()
    frees everything (the reference engine too)."""
    from specconform.adapters.engine import BundledEngine
    from specconform.protocol.load import load_protocol
    from specconform.util import progress

    # The timing lines this test reads appear only with --verbose.
    monkeypatch.setattr(progress, "_VERBOSE", True)
    protocol = load_protocol(CI_GATE).model
    engine = BundledEngine(protocol.engine, mutant=None, log=lambda line: None)
    groups = {g.name: g for g in protocol.groups}
    first = engine.run_group(groups["sync"], [1, 2, 3])
    # Engines are keyed by (mode, draft depth, slots); distribution groups use batch_size.
    slots = protocol.engine.batch_size
    sync_llm = engine._engines[("sync", groups["sync"].draft_loops, slots)]
    engine.run_group(groups["async"], [1, 2, 3])
    assert list(engine._engines) == [("async", groups["async"].draft_loops, slots)]
    assert sync_llm.runner.cache is None  # freed, not just dropped
    assert len(engine.target_law(engine.prompt)) == engine.vocab_size
    engine.close()
    assert engine._engines == {} and engine._reference is None
    again = engine.run_group(groups["sync"], [1, 2, 3])  # rebuilt on demand
    assert [r.tokens for r in again] == [r.tokens for r in first]
    assert "timing: group sync: 3 seeds" in capsys.readouterr().err
