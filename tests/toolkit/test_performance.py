"""The performance kind (issue 14, part 3): the no-regression A/B.

These tests assert structure, never speed: the ABBA order, the evaluator's decision on
planted per-process numbers (a candidate 30% slower FAILs the pre-registered rule,
equal sides PASS), "no evidence" below two processes per side, verify's recomputation
from the raw measurements (an edited number is caught), and the profiler attribution's
phases. Speed claims come from the kind's archives and bench/, never from timings here.

The rule is a tolerance rule without a p-value (no alpha): on planted numbers its
decision is deterministic, so no test here can be flaky.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from specconform.evidence import seal
from specconform.kinds.performance import abba_order, evaluate, summarize
from specconform.kinds.performance.evaluate import RAW_FILE
from specconform.kinds.performance.profile import phase_table, timeline_svg
from specconform.protocol.load import validate
from specconform.results import RawData
from specconform.runner.context import RunContext
from specconform.util.errors import EvidenceError, ProtocolError
from specconform.verification import verify_archive
from tests.toolkit.cli_helpers import ROOT

PROTOCOL = ROOT / "protocols" / "ci_performance.yaml"


def _protocol(**changes) -> dict:
    data = yaml.safe_load(PROTOCOL.read_text())
    data.update(changes)
    return validate(data, "test").model_dump(mode="json")


def _raw(base_tok_s: list[float], cand_tok_s: list[float], order=None) -> RawData:
    """Per-process measurements: each process one run of 100 tokens over 4 requests,
    its seconds set so that its tokens/s is the planted value."""

    def process(side, i, rate):
        runs = [{"seconds": 100.0 / rate, "tokens": 100, "requests": 4, "rounds": 10}]
        cell = {"concurrency": 1, "sampling": "greedy", "peak_memory_bytes": 1 << 20, "runs": runs}
        return {"side": side, "process": i, "device": "cpu", "cells": [cell]}

    sides = order or abba_order(len(base_tok_s))
    rates = {"base": list(base_tok_s), "candidate": list(cand_tok_s)}
    seen = {"base": 0, "candidate": 0}
    procs = []
    for side in sides:
        procs.append(process(side, seen[side], rates[side][seen[side]]))
        seen[side] += 1
    data = {
        "order": [{"side": p["side"], "process": p["process"]} for p in procs],
        "sides": {"base": {}, "candidate": {}},
        "processes": procs,
    }
    return RawData({RAW_FILE: json.dumps(data).encode()})


def _one_cell(**criterion) -> dict:
    return _protocol(
        processes=3,
        concurrency=[1],
        sampling=["greedy"],
        criterion={"rule": "mean_within", "max_slowdown": 0.05, **criterion},
    )


def _row(evaluation, name):
    return next(r for r in evaluation.tests if r.test == name)


# --- design and schema ----------------------------------------------------------------


def test_abba_order_alternates_pairs():
    assert abba_order(2) == ["base", "candidate", "candidate", "base"]
    assert abba_order(3) == ["base", "candidate", "candidate", "base", "base", "candidate"]


def test_schema_refuses_an_ab_of_one_configuration_and_a_single_process():
    with pytest.raises(ProtocolError, match="same configuration"):
        _protocol(candidate={"mode": "nospec"})
    with pytest.raises(ProtocolError, match="processes"):
        _protocol(processes=1)
    with pytest.raises(ProtocolError, match="deciding_concurrency"):
        _protocol(criterion={"deciding_concurrency": [64]})
    # The same configuration is the point of a --base-ref A/B (code differs, not config).
    assert _protocol(candidate={"mode": "nospec"}, base_ref="HEAD~1")["base_ref"] == "HEAD~1"


def test_summary_is_mean_sd_min_max():
    s = summarize([1.0, 2.0, 3.0])
    assert (s.n, s.mean, s.sd, s.min, s.max) == (3, 2.0, 1.0, 1.0, 3.0)
    assert s.text(3) == "2 ± 1 [1, 3] (n=3)"


# --- the evaluator on planted numbers ---------------------------------------------------


def test_equal_sides_pass():
    ev = evaluate(_one_cell(), _raw([100.0, 101.0, 99.0], [99.5, 100.5, 100.0]))
    row = _row(ev, "tokens_per_s_c1_greedy")
    assert row.status == "PASS" and row.deciding and ev.verdict.verdict == "PASS"
    assert row.statistic == pytest.approx(1.0)
    assert row.detail.sides["candidate"]["tpot_ms"].mean == pytest.approx(40.0, rel=0.01)


def test_a_thirty_percent_slower_candidate_fails():
    ev = evaluate(_one_cell(), _raw([100.0, 101.0, 99.0], [70.0, 71.0, 69.0]))
    row = _row(ev, "tokens_per_s_c1_greedy")
    assert row.status == "FAIL" and row.statistic == pytest.approx(0.70)
    assert "ratio 0.700" in row.reason and "mean_within" in row.reason
    assert ev.verdict.verdict == "FAIL" and ev.verdict.failed == ("tokens_per_s_c1_greedy",)
    # The verdict states a tolerance rule, never a false-fail rate it does not have.
    assert "no p-value" in ev.verdict.statement


def test_ranges_overlap_rule_reads_min_and_max():
    # Candidate mean 10% below, but its max reaches the base's min: overlap holds.
    noisy = _raw([95.0, 100.0, 105.0], [80.0, 90.0, 100.0])
    assert _row(evaluate(_one_cell(), noisy), "tokens_per_s_c1_greedy").status == "FAIL"
    overlap = evaluate(_one_cell(rule="ranges_overlap"), noisy)
    assert _row(overlap, "tokens_per_s_c1_greedy").status == "PASS"
    apart = evaluate(_one_cell(rule="either"), _raw([100.0, 101.0, 99.0], [70.0, 71.0, 69.0]))
    assert _row(apart, "tokens_per_s_c1_greedy").status == "FAIL"


def test_one_process_per_side_is_no_evidence_never_pass():
    protocol = _one_cell()
    raw = _raw([100.0], [100.0], order=["base", "candidate"])
    ev = evaluate(protocol, raw)
    assert _row(ev, "tokens_per_s_c1_greedy").status == "NO_EVIDENCE"
    assert ev.verdict.verdict == "FAIL"


def test_an_order_other_than_abba_fails_the_design_row():
    order = ["base", "base", "base", "candidate", "candidate", "candidate"]
    ev = evaluate(_one_cell(), _raw([100.0] * 3, [100.0] * 3, order=order))
    assert _row(ev, "abba_order").status == "FAIL" and ev.verdict.verdict == "FAIL"


# --- profiler attribution --------------------------------------------------------------


_PROFILE_BOTH_SIDES = """
import json, sys
import torch
import engine_under_test as eut
from specconform.runner import performance_worker as worker
request = json.loads(sys.argv[1])
# Code objects created (and so soon freed) inside a measured window are what torch's
# Python tracer later decodes as dangling names: none may appear there.
created, measuring = [], [False]
sys.addaudithook(lambda ev, args: measuring[0] and ev in ("compile", "exec", "import")
                 and created.append(f"{ev} {str(args[0])[:60]}"))
window = worker._profiled_window
def watched(*args):
    measuring[0] = True
    try:
        return window(*args)
    finally:
        measuring[0] = False
worker._profiled_window = watched
configs = {"candidate": {"mode": "async", "draft_loops": 2},
           "base": {"mode": "nospec", "draft_loops": None}}
out = {side: worker.profile(eut, torch, {**request, "config": c}) for side, c in configs.items()}
out["created_in_window"] = created
print(json.dumps(out))
"""


def test_profile_attributes_the_speculative_phases_in_a_fresh_process():
    """The worker's profiled window on the tiny preset: an async side spends CPU time in
    draft, verify, accept and collect; nospec has no draft. It runs in a fresh process,
    as the runner's workers do. No code object may be created inside the measured window:
    torch's Python tracer keeps raw pointers to them, and decoding the freed ones failed
    in CI (``UnicodeDecodeError``) before the worker primed the profiler."""
    import subprocess
    import sys

    request = {
        "engine": {
            "preset": "tiny",
            "model_seed": 0,
            "device": "cpu",
            "dtype": "float32",
            "num_speculative_tokens": 3,
            "cuda_graphs": False,
        },
        "prompts": [[1, 2, 3, 4]],
        "profile": {
            "concurrency": 1,
            "sampling": "greedy",
            "warmup_steps": 1,
            "steps": 1,
            "top": 5,
        },
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE_BOTH_SIDES, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    profiles = json.loads(done.stdout.strip().splitlines()[-1])
    assert profiles["created_in_window"] == []  # the priming window ran them all first
    assert profiles["candidate"]["with_stack"] and profiles["base"]["with_stack"]
    cand, base = (phase_table(profiles[s]) for s in ("candidate", "base"))
    for phase in ("draft", "verify", "accept", "collect"):
        assert cand.phases[phase].self_cpu_us > 0, phase
    # The engine's sub-phases (draft.sample, verify.probabilities) are recorded apart
    # and fold into their parents here: the table keeps its five phases.
    recorded = {op["phase"] for op in profiles["candidate"]["ops"]}
    assert {"draft.sample", "verify.probabilities"} <= recorded
    assert set(cand.phases) == {"draft", "verify", "accept", "collect", "other"}
    sample_us = sum(
        op["self_cpu_us"] for op in profiles["candidate"]["ops"] if op["phase"] == "draft.sample"
    )
    assert 0 < sample_us < cand.phases["draft"].self_cpu_us
    assert cand.phases["draft"].ops > 0 and base.phases["draft"].ops == 0
    assert cand.ranked_by == "self_cpu_us" and len(cand.top) == 5
    assert any("engine_under_test/" in t.location for t in cand.top)
    svg = ElementTree.fromstring(timeline_svg(profiles))
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("draft") for t in titles) and any(
        t.startswith("collect") for t in titles
    )


# --- end to end: run, archive, verify recomputes -------------------------------------------


def _in_process_worker(tree, request, worker_path):
    """The runner's worker call, run in this process (same request and result as the
    subprocess; the subprocess path itself is the equality runner's, tested there):
    four torch imports fewer keeps the test within its time."""
    import torch

    import engine_under_test as eut
    from specconform.runner import performance_worker as worker

    assert worker_path.name == "performance_worker.py" and tree.side == "candidate"
    return {
        "device": "cpu",
        "engine_file": eut.__file__,
        "cells": worker.measure(eut, torch, request),
    }


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A run of a cut-down protocol: 2 processes per side, one cell, no profile, through
    execute() (collect, evaluate, seal) with the worker in process."""
    from specconform.protocol.load import load_protocol
    from specconform.runner import performance as runner
    from specconform.runner.execute import PreparedRun
    from specconform.util.progress import silent

    tmp = tmp_path_factory.mktemp("perf")
    data = yaml.safe_load(PROTOCOL.read_text())
    data.update(concurrency=[1], sampling=["greedy"], max_tokens=6, timed_runs=1, profile=None)
    path = tmp / "perf_small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "run_worker", _in_process_worker)
        run = PreparedRun(
            load_protocol(path), out_dir=tmp / "out", argv=("specconform", "run", str(path)),
            mutant=None, key=None, sign=False,
        )  # fmt: skip
        outcome = run.execute(silent)
    return outcome.archive


def test_run_writes_abba_processes_and_verify_recomputes(small_run, tmp_path):
    report = verify_archive(small_run)
    assert report.tests_recomputed == 2  # abba_order and the one cell
    with zipfile.ZipFile(small_run) as zf:
        top = zf.namelist()[0].split("/")[0]
        raw = json.loads(zf.read(f"{top}/{RAW_FILE}"))
        zf.extractall(tmp_path / "x")
    assert [p["side"] for p in raw["processes"]] == abba_order(2)
    assert all(len(p["cells"][0]["runs"]) == 1 for p in raw["processes"])

    # Plant a 30% slower candidate in the raw numbers and re-seal: the stated rows no
    # longer follow from the raw data, and verify says so.
    run_dir = tmp_path / "x" / top
    for proc in raw["processes"]:
        if proc["side"] == "candidate":
            for run in proc["cells"][0]["runs"]:
                run["seconds"] /= 0.7
    (run_dir / RAW_FILE).write_text(json.dumps(raw))
    shutil.rmtree(tmp_path / "x" / top / "plots", ignore_errors=True)
    tampered = seal(run_dir, key=None, sign=False)
    with pytest.raises(EvidenceError, match="results/tests.json: test tokens_per_s_c1_greedy"):
        verify_archive(tampered)


def test_base_ref_runs_the_candidate_configuration_in_the_base_tree(monkeypatch):
    """With --base-ref the code differs, not the configuration: both sides get the
    candidate's configuration, the base side in the base tree (workers faked: this
    checks the runner's requests and order, not the engine)."""
    from specconform.protocol.load import load_protocol
    from specconform.runner import performance as runner
    from specconform.runner.equality import SourceTree
    from specconform.util.progress import silent

    base = SourceTree("base", ROOT, "HEAD~1", "b" * 40, False)
    monkeypatch.setattr(runner, "base_tree", lambda ref: base)
    calls = []

    def fake(tree, request, worker_path):
        calls.append((tree.side, request["config"], bool(request.get("profile"))))
        if request.get("profile"):
            return {"profile": {"device": "cpu", "steps": 1, "ops": [], "spans": []}}
        cells = [
            {**c, "peak_memory_bytes": 1, "runs": [{"seconds": 1.0, "tokens": 8, "requests": 1, "rounds": 2}]}
            for c in request["cells"]
        ]  # fmt: skip
        return {"device": "cpu", "cells": cells}

    monkeypatch.setattr(runner, "run_worker", fake)
    loaded = load_protocol(PROTOCOL)
    data = loaded.model.model_dump(mode="json")
    data["base_ref"] = "HEAD~1"
    loaded = type(loaded)(loaded.path, loaded.source, validate(data, "t"), loaded.hash)
    context = RunContext.standalone()
    files = runner.collect(loaded, progress=silent, log=lambda line: None, context=context)
    timed = [(side, config) for side, config, profiled in calls if not profiled]
    assert [side for side, _ in timed] == abba_order(2)
    assert all(config == {"mode": "async", "draft_loops": 2} for _, config in timed)
    raw = json.loads(files[RAW_FILE])
    assert raw["sides"]["base"]["commit"] == "b" * 40 and raw["sides"]["base"]["ref"] == "HEAD~1"
    assert context.outputs.run_fields["performance_sides"]["base"].startswith("async d=2 @ bbbb")
    assert "plots/timeline-greedy-c1.svg" in files


def test_location_tells_no_python_frame_from_outside_the_engine():
    """An operator under an engine frame reads that line; under torch's own Python code,
    that function; with no Python frame linked at all (the H200 trace of torch 2.11),
    NO_FRAME -- never "outside the engine", which would claim a frame was seen."""
    from types import SimpleNamespace

    from specconform.runner.performance_worker import NO_FRAME, NO_STACK, _location

    def op(parent=None, stack=()):
        return SimpleNamespace(name="aten::mm", cpu_parent=parent, stack=list(stack))

    engine = SimpleNamespace(
        name="/x/engine_under_test/model/layers.py(152): forward", cpu_parent=None
    )
    torch_fn = SimpleNamespace(name="torch/nn/functional.py(88): linear", cpu_parent=None)
    assert _location(op(engine)) == "engine_under_test/model/layers.py(152): forward"
    assert _location(op(stack=["/y/engine_under_test/llm.py(9): step"])) == (
        "engine_under_test/llm.py(9): step"
    )
    assert _location(op(torch_fn)) == "torch/nn/functional.py(88): linear"
    assert _location(op()) == NO_FRAME
    assert _location(op(engine), with_stack=False) == NO_STACK
