"""Import layering: specconform's stats, kinds, evidence and report never need torch or
the bundled engine (DESIGN.md: a reviewer verifies and renders evidence with numpy,
scipy and pandas alone).

Two checks: a subprocess in which importing torch, triton or engine_under_test raises
(a sys.meta_path blocker) imports the four packages and evaluates each kind on small raw
data; and a static scan that no module of those packages imports them at module level
(a lazy import inside a function, e.g. the environment manifest describing torch, is
allowed: it runs only when a run describes itself).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stats", "kinds", "evidence", "report")
FORBIDDEN = ("torch", "triton", "engine_under_test")

BLOCKED_RUN = r"""
import importlib.abc, io, json, sys

FORBIDDEN = {forbidden!r}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"layering: {{name}} is blocked")
        return None

sys.meta_path.insert(0, Blocker())
for name in {packages!r}:
    __import__("specconform." + name)

import numpy as np
from specconform.calibration import make_world, simulate
from specconform.kinds import KINDS, reevaluate
from specconform.results import RawData

# distribution: the exact synthetic laws, 400 seeds
world = make_world(0)
groups = [{{"name": "nospec", "mode": "nospec", "seed_offset": 1000000}},
          {{"name": "async", "mode": "async", "draft_loops": 2, "seed_offset": 0}}]
samples = simulate(world, 400, np.random.default_rng(0), groups=groups)
buf = io.StringIO(); samples.to_csv(buf, index=False)
proto = {{"kind": "distribution", "name": "x", "alpha": 0.01, "groups": groups,
          "verdict": {{"combine": "holm", "alpha": 0.01}},
          "tests": [{{"name": "t1", "type": "t1_gof", "role": "prerequisite",
                      "groups": ["nospec"]}},
                    {{"name": "acc", "type": "acceptance", "role": "mechanism",
                      "groups": ["async"]}}]}}
ev = reevaluate(proto, RawData({{"raw/samples.csv": buf.getvalue().encode(),
                                 "raw/reference.json": json.dumps(world.reference).encode()}}))
out = {{"distribution": ev.verdict.verdict}}

# montecarlo: counts exactly at the expected cells of one position
from specconform.kinds.laws import montecarlo_laws
case = {{"name": "c", "vocab": 4, "K": 1, "draft_lens": [1], "law_seed": 0, "p_support": 3,
         "q_support": 3, "concentration": 1.0}}
p, q = montecarlo_laws(case)
from specconform.stats.speculative import joint_cells
cells = joint_cells(p[0], q[0]) * 10000
lines = ["case,position,cell,token,count"]
for i, c in enumerate(np.round(cells).astype(int)):
    if c:
        lines.append(f"c,0,{{'accept' if i < 4 else 'reject'}},{{i % 4}},{{c}}")
mc = {{"kind": "montecarlo", "name": "m", "alpha": 0.01, "min_expected": 5.0,
       "verdict": {{"combine": "holm", "alpha": 0.01}}, "cases": [case]}}
ev = reevaluate(mc, RawData({{"raw/montecarlo_counts.csv": "\n".join(lines).encode()}}))
out["montecarlo"] = ev.verdict.verdict

# quadrature: a broken kernel's counts (everything on token 0) must fail its bound
qcase = {{"name": "q", "vocab": 2, "p": [0.5, 0.5], "q": [0.5, 0.5], "grid": 4}}
raw = {{"grid": 4, "first_counts": {{"0": {{"0": 16}}, "1": {{"0": 16}}}},
        "bonus_counts": {{"0": {{"0": 16}}, "1": {{"0": 16}}}}, "k0_counts": {{"0": 4}},
        "edge_committed": [], "kernel_errors": 0}}
ev = reevaluate({{"kind": "quadrature", "name": "q", "cases": [qcase]}},
                RawData({{"raw/quadrature/q.json": json.dumps(raw).encode()}}))
out["quadrature"] = ev.verdict.verdict
# the exact kernel on the same case: p = q uniform accepts every draft, bonus uniform
raw = {{"grid": 4, "first_counts": {{"0": {{"0": 16}}, "1": {{"1": 16}}}},
        "bonus_counts": {{"0": {{"0": 8, "1": 8}}, "1": {{"0": 8, "1": 8}}}},
        "k0_counts": {{"0": 2, "1": 2}}, "edge_committed": [], "kernel_errors": 0}}
ev = reevaluate({{"kind": "quadrature", "name": "q", "cases": [qcase]}},
                RawData({{"raw/quadrature/q.json": json.dumps(raw).encode()}}))
out["quadrature_exact"] = ev.verdict.verdict
# performance: two processes per side in ABBA order with equal planted tokens/s
cell = {{"concurrency": 1, "sampling": "greedy", "peak_memory_bytes": 1,
         "runs": [{{"seconds": 1.0, "tokens": 10, "requests": 1, "rounds": 5}}]}}
order = ["base", "candidate", "candidate", "base"]
procs = [{{"side": s, "process": i // 2, "device": "cpu", "cells": [cell]}}
         for i, s in enumerate(order)]
perf = {{"kind": "performance", "processes": 2, "concurrency": [1], "sampling": ["greedy"],
         "criterion": {{"rule": "mean_within", "max_slowdown": 0.05}}}}
raw = {{"order": [{{"side": s}} for s in order], "processes": procs, "sides": {{}}}}
ev = reevaluate(perf, RawData({{"raw/performance.json": json.dumps(raw).encode()}}))
out["performance"] = ev.verdict.verdict
# sequence: ci_sequence on the numpy speculative sampler's exact laws
from specconform.kinds.sequence import evaluate_frames
from specconform.protocol.load import load_protocol
from specconform.calibration.sequence_synthetic import simulate
sp = load_protocol("tests/toolkit/fixtures/sequence_protocol.yaml").data
out["sequence"] = evaluate_frames(sp, *simulate(sp, 1)).verdict.verdict
out["kinds"] = sorted(KINDS)
out["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
print(json.dumps(out))
"""


def test_packages_import_and_evaluate_with_torch_and_engine_blocked():
    code = BLOCKED_RUN.format(forbidden=set(FORBIDDEN), packages=PACKAGES)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["kinds"] == [
        "distribution",
        "equality",
        "mcnemar",
        "montecarlo",
        "performance",
        "quadrature",
        "sequence",
        "tree",
    ]
    assert out["performance"] == "PASS"  # equal planted sides, evaluated torch-free
    # ci_sequence on exact laws: Holm at 0.01 over 7 tests, this seed passes.
    assert out["sequence"] == "PASS"
    # Exact-law samples pass (Holm at 0.01 over 2 tests: false fail <= 1%, this seed
    # passes); counts equal to their expectation pass; a kernel that always commits
    # token 0 against a uniform p is 0.5 away from the law, far beyond 1.5/4.
    assert out["distribution"] == "PASS" and out["montecarlo"] == "PASS"
    assert out["quadrature"] == "FAIL" and out["quadrature_exact"] == "PASS"
    assert out["loaded"] == []


def test_blocker_is_effective():
    """Negative control: the blocker really refuses the engine (else the test above
    could pass on a machine where importing it silently fails for other reasons)."""
    code = BLOCKED_RUN.format(forbidden=set(FORBIDDEN), packages=PACKAGES)
    code = code.split("for name in")[0] + "import engine_under_test\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode != 0 and "layering: engine_under_test is blocked" in done.stderr


def _module_level_imports(tree: ast.Module) -> list[str]:
    """Top-level imports of a module, including those under module-level if/try blocks
    (but not inside functions or classes, and not under `if TYPE_CHECKING:`)."""
    names, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                stack += handler.body
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_level_import_of_torch_or_engine(package):
    files = sorted((ROOT / "specconform" / package).rglob("*.py"))
    assert files
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in _module_level_imports(ast.parse(path.read_text()))
        if name.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_static_scan_catches_a_module_level_import():
    """Negative control for the scan."""
    tree = ast.parse(
        "import os\ntry:\n    import torch\nexcept ImportError:\n    pass\n"
        "def f():\n    import engine_under_test\n"
    )
    assert set(_module_level_imports(tree)) == {"os", "torch"}
