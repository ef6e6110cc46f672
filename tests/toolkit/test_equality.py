"""The equality kind (issue 14, part 2): greedy token identity between configurations of
one tree and between this tree and a git base, with the first divergence named.

Deterministic (greedy decoding draws nothing): no alpha, no power; the negative controls
are a planted change of greedy output in a commit of a throw-away clone, which must fail
with its divergence named, and hand-made divergences for the evaluator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specconform.kinds.equality import first_divergence
from specconform.kinds.equality.evaluate import ComparisonSpec, evaluate_comparison
from specconform.protocol.load import validate
from specconform.util.errors import ProtocolError
from tests.toolkit.cli_helpers import ROOT, run_cli

PROTOCOL = ROOT / "protocols" / "equality.yaml"


def _small(tmp_path: Path, **changes) -> Path:
    """The shipped protocol cut to 3 prompts x 24 tokens and two configurations."""
    data = yaml.safe_load(PROTOCOL.read_text())
    data.update(
        {
            "prompts": {"count": 3, "length": 6, "seed": 7},
            "max_tokens": 24,
            "configurations": [
                c for c in data["configurations"] if c["name"] in ("nospec_c1", "async_c4")
            ],
            "comparisons": [
                {"name": "async_vs_nospec", "base": "nospec_c1", "candidate": "async_c4"}
            ],
        },
        **changes,
    )
    path = tmp_path / "equality_small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- evaluator -------------------------------------------------------------------------


def test_first_divergence_names_position_and_tokens():
    assert first_divergence(0, [1, 2, 3], [1, 2, 3]) is None
    d = first_divergence(4, [1, 2, 3], [1, 9, 3])
    assert (d.prompt, d.position, d.base_token, d.candidate_token) == (4, 1, 2, 9)
    short = first_divergence(0, [1, 2], [1, 2, 5])  # one sequence ended early
    assert (short.position, short.base_token, short.candidate_token) == (2, None, 5)


def _raw(base, cand, gaps=None):
    return {
        "prompts": [[0]] * len(base),
        "outputs": {"candidate": {"a": base, "b": cand}},
        "gaps": gaps or {},
    }


def _protocol(near_ties="fail", gap=1e-3):
    return {"near_tie_gap": gap, "near_ties": near_ties}


def test_divergence_fails_and_is_named():
    spec = ComparisonSpec("b_vs_a", "primary", ("candidate", "a"), ("candidate", "b"))
    row = evaluate_comparison(_protocol(), spec, _raw([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]]))
    assert row.status == "FAIL" and row.statistic == 1.0 and row.n == 2
    assert "prompt 1 position 1: base 5 vs candidate 6" in row.reason
    same = evaluate_comparison(_protocol(), spec, _raw([[1, 2]], [[1, 2]]))
    assert same.status == "PASS" and same.statistic == 0.0


def test_near_tie_is_told_apart_and_allowed_only_when_preregistered():
    spec = ComparisonSpec("b_vs_a", "primary", ("candidate", "a"), ("candidate", "b"))
    gaps = {"b_vs_a/0": {"base": [5, 6, 2e-4], "candidate": [6, 5, 1e-4]}}
    raw = _raw([[1, 5]], [[1, 6]], gaps)
    strict = evaluate_comparison(_protocol("fail"), spec, raw)
    assert strict.status == "FAIL" and strict.detail.divergences[0].near_tie
    allowed = evaluate_comparison(_protocol("allow"), spec, raw)
    assert allowed.status == "PASS" and allowed.detail.near_ties == 1
    real = {"b_vs_a/0": {"base": [5, 6, 3.0], "candidate": [6, 5, 2.5]}}
    assert (
        evaluate_comparison(_protocol("allow"), spec, _raw([[1, 5]], [[1, 6]], real)).status
        == "FAIL"
    )  # a wide gap is a real change, whatever the tie rule


def test_schema_refuses_unknown_configuration_and_missing_draft_loops():
    data = yaml.safe_load(PROTOCOL.read_text())
    data["comparisons"][0]["candidate"] = "nope"
    with pytest.raises(ProtocolError, match="unknown configuration 'nope'"):
        validate(data, "x.yaml")
    data = yaml.safe_load(PROTOCOL.read_text())
    data["configurations"][2].pop("draft_loops")
    with pytest.raises(ProtocolError, match="draft_loops"):
        validate(data, "x.yaml")


# --- end to end ------------------------------------------------------------------------


def test_modes_are_token_identical_in_this_tree(tmp_path):
    res = run_cli("run", _small(tmp_path), "--out", tmp_path / "out", "--no-sign")
    assert res.returncode == 0, res.stdout + res.stderr
    run_dir = next(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    raw = json.loads((run_dir / "raw" / "outputs.json").read_text())
    assert sorted(raw["outputs"]) == ["candidate"]
    assert all(len(t) == 24 for t in raw["outputs"]["candidate"]["async_c4"])
    verify = run_cli("verify", next((tmp_path / "out").glob("*.zip")), "--skip-signature")
    assert verify.returncode == 0, verify.stderr


PLANTED = """
# Planted for the test: greedy outputs change at the sixth generated token.
_planted_generate = LLM.generate


def _planted(self, *args, **kwargs):
    outs = _planted_generate(self, *args, **kwargs)
    for out in outs:
        if len(out.token_ids) > 5:
            out.token_ids[5] ^= 1  # another token of the (even-sized) vocabulary
    return outs


LLM.generate = _planted
"""


@pytest.fixture()
def clone(tmp_path):
    """A throw-away clone of this repository's committed state (a local clone: seconds)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(target)], check=True)
    for cmd in (["config", "user.email", "t@example.invalid"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(target), *cmd], check=True)
    return target


def _run_in(clone: Path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, CI="true", PYTHONPATH=str(clone))
    return subprocess.run(
        [sys.executable, "-m", "specconform", *map(str, args)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_base_ref_passes_on_an_unchanged_tree_and_fails_on_a_planted_change(tmp_path, clone):
    protocol = _small(tmp_path, comparisons=[])
    same = _run_in(
        clone, "run", protocol, "--base-ref", "HEAD", "--out", tmp_path / "same", "--no-sign"
    )
    assert same.returncode == 0, same.stdout + same.stderr
    init = clone / "engine_under_test" / "__init__.py"
    init.write_text(init.read_text() + PLANTED)
    subprocess.run(["git", "-C", str(clone), "commit", "-qam", "planted greedy change"], check=True)
    changed = _run_in(
        clone, "run", protocol, "--base-ref", "HEAD~1", "--out", tmp_path / "changed", "--no-sign"
    )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    run_dir = next(p for p in (tmp_path / "changed").iterdir() if p.is_dir())
    rows = {r["test"]: r for r in json.loads((run_dir / "results" / "tests.json").read_text())}
    assert set(rows) == {"base_vs_candidate_nospec_c1", "base_vs_candidate_async_c4"}
    for row in rows.values():
        assert row["status"] == "FAIL" and row["statistic"] == 3.0
        assert "prompt 0 position 5" in row["reason"]
        first = row["detail"]["divergences"][0]
        assert first["gap_base"] is not None and first["gap_candidate"] is not None
    sides = json.loads((run_dir / "raw" / "outputs.json").read_text())["sides"]
    head = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD~1"], text=True, capture_output=True, check=True
    ).stdout.strip()
    assert sides["base"]["commit"] == head and sides["base"]["ref"] == "HEAD~1"
    # The base snapshot is cached inside the clone's reports/.cache, its tree untouched.
    assert (clone / "reports" / ".cache" / "base" / head / "engine_under_test").is_dir()
    status = subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=no"],
        text=True,
        capture_output=True,
    ).stdout
    assert status == ""


def test_bad_base_ref_is_one_line_exit_2(tmp_path):
    res = run_cli(
        "run",
        _small(tmp_path),
        "--base-ref",
        "no-such-ref-xyz",
        "--out",
        tmp_path / "out",
        "--no-sign",
    )
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "no-such-ref-xyz" in errors[0]
    assert not (tmp_path / "out").exists()
