"""Two diagnostics of bench/ that a device call relies on: vllm_kernel_points.py (a
quadrature protocol's accept kernel point by point, and the comparison of two devices'
points) and stack_sample.py (where a run's wall goes, per thread). Deterministic: the
quadrature grid is fixed, and the sampler test waits for its samples instead of timing."""

import argparse
import json
import threading
import time
from pathlib import Path

import pytest

from bench.stack_sample import StackSampler
from bench.vllm_kernel_points import collect, compare

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols/peers/vllm_kernel.yaml"
CASE = "one_token_target"  # p = 1 on one token, p_bonus on another: a wrong bonus shows


def _points(tmp_path, name, mutant=None):
    out = tmp_path / f"{name}.json"
    args = argparse.Namespace(
        protocol=str(PROTOCOL),
        case=CASE,
        device="cpu",
        adapter="bundled",
        mutant=mutant,
        json=str(out),
    )
    assert collect(args) == 0
    return out


def test_the_exact_kernel_commits_no_zero_mass_token_and_compares_equal(tmp_path, capsys):
    a = _points(tmp_path, "a")
    got = json.loads(a.read_text())
    summary = got["cases"][CASE]
    assert summary["passed"] and summary["zero_mass_commits"] == 0
    assert summary["zero_mass_points"] == {}
    assert len(got["points"]) == summary["points"] > 0
    assert compare(str(a), str(a)) == 0
    assert "IDENTICAL: 0 of" in capsys.readouterr().out


def test_a_planted_bonus_bug_shows_in_the_points_and_the_comparison(tmp_path, capsys):
    # Negative control: the bonus drawn from p at the wrong position commits p's token,
    # of zero bonus mass here, at every point where the bonus is drawn.
    a = _points(tmp_path, "a")
    b = _points(tmp_path, "b", mutant="bonus_off_by_one")
    summary = json.loads(b.read_text())["cases"][CASE]
    assert not summary["passed"] and summary["zero_mass_commits"] > 0
    assert summary["zero_mass_points"].get("bonus", 0) > 0
    capsys.readouterr()
    assert compare(str(a), str(b)) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and f"{CASE}: differing points" in out
    assert compare(str(a), str(tmp_path / "missing.json")) == 2


def _busy_in_named_function(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def test_the_stack_sampler_names_the_busy_function_per_thread_kind():
    stop = threading.Event()
    workers = [
        threading.Thread(target=_busy_in_named_function, args=(stop,), name=f"crunch-{i}")
        for i in range(2)
    ]
    with StackSampler(0.002) as sampler:
        for w in workers:
            w.start()
        deadline = time.monotonic() + 60  # generous: waits for samples, times nothing
        while sampler.threads["crunch"].samples < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        for w in workers:
            w.join()
    report = sampler.report(top=50)
    assert "crunch" in report  # crunch-0 and crunch-1: one row, numbered suffix dropped
    assert not any(name.startswith("crunch-") for name in report)
    crunch = report["crunch"]
    assert crunch["samples"] >= 20
    named = dict(crunch["inclusive"])
    busy = "tests/toolkit/test_bench_diagnostics.py:_busy_in_named_function"
    # On every sample, so left out of "inclusive" (frames on >= 98 % say nothing) ...
    assert busy not in named
    # ... and at the top or just below it: the loop's own frame is the top of the stack.
    assert any(f == busy for f, _ in crunch["self"])


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_the_sampler_cli_refuses_a_non_positive_interval(interval, monkeypatch, capsys):
    import bench.stack_sample as ss

    monkeypatch.setattr("sys.argv", ["stack_sample.py", "--interval", str(interval), "-m", "x"])
    with pytest.raises(SystemExit) as e:
        ss.main()
    assert e.value.code == 2 and "--interval must be > 0" in capsys.readouterr().err
