"""Tree speculation (issue 34): the exact tree laws, the reference tree sampler passes
the tree protocols, every planted tree bug fails them, bad input is one line.

The grid protocol (protocols/tree.yaml) is deterministic: no alpha, nothing to flake. The
sampled protocol is seeded (PCG64 keyed by offset and setting): alpha = 0.01 Holm over its
chi-square tests; its power against the planted bugs is measured in docs/kill-matrix.md
("Tree"); here its seeds are fixed, so each assertion is the same in every run.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from engine_under_test.mutants import list_mutants
from specconform.adapters.tree import batch_of
from specconform.adapters.tree_reference import ReferenceTree
from specconform.kinds.tree.laws import target_law, threshold_law, tree_of
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.tree_helpers import run_tree

TREE_MUTANTS = [m.name for m in list_mutants("tree")]


def _cases(name):
    return yaml.safe_load((ROOT / "protocols" / f"{name}.yaml").read_text())["cases"]


@pytest.mark.parametrize("case", _cases("tree_sampled"), ids=lambda c: c["name"])
def test_sglang_rule_at_thresholds_one_is_the_target_law(case):
    tree = tree_of(case)
    exact, rule = target_law(tree), threshold_law(tree, 1.0, 1.0)
    assert abs(sum(exact.probs.values()) - 1.0) < 1e-9 and rule.error == 0.0
    for seq in set(exact.probs) | set(rule.probs):
        assert abs(exact.probs.get(seq, 0.0) - rule.probs.get(seq, 0.0)) < 1e-12, seq
    # Negative control: a lossy setting is a different law on every case with a choice.
    lossy = threshold_law(tree, 1.0, 0.5)
    if case["name"] != "certain":
        diff = sum(abs(exact.probs.get(s, 0) - lossy.probs.get(s, 0)) for s in exact.probs)
        assert diff > 0.05


def test_target_law_by_hand():
    # Root: p = (0.5, 0.3, 0.2) over 3 tokens, one child (token 1) whose p is (0, 0, 1).
    case = {"vocab": 3, "parents": [-1, 0], "tokens": [-1, 1], "laws": [[5, 3, 2], [0, 0, 1]]}
    law = target_law(tree_of(case)).probs
    assert law == pytest.approx({(0,): 0.5, (1, 2): 0.3, (2,): 0.2})


def test_reference_sampler_follows_the_lossy_law_it_states():
    """The reference sampler at lossy thresholds against threshold_law (Monte Carlo,
    200,000 rows, seed 3): every sequence within 5 standard errors (a per-cell bound with
    false-fail rate < 1e-5 over these cells); negative control: the exact law is far."""
    case = _cases("tree_lossy")[0]
    tree = tree_of(case)
    n = 200_000
    rng = np.random.Generator(np.random.PCG64(3))
    batch = batch_of([tree], np.zeros(n, np.int64), rng.random((n, tree.nodes)), rng.random(n))
    out = ReferenceTree(None, 0.3, 0.6).accept_tree(batch)
    seqs, counts = np.unique(
        [" ".join(str(t) for t in row if t >= 0) for row in out.tokens], return_counts=True
    )
    observed = {tuple(int(x) for x in s.split()): c / n for s, c in zip(seqs, counts, strict=True)}
    law = threshold_law(tree, 0.3, 0.6).probs
    for seq in set(law) | set(observed):
        p = law.get(seq, 0.0)
        assert abs(observed.get(seq, 0.0) - p) <= 5 * np.sqrt(max(p, 1e-6) * (1 - p) / n), seq
    exact = target_law(tree).probs
    assert max(abs(observed.get(s, 0.0) - p) for s, p in exact.items()) > 0.05


@pytest.mark.parametrize("name", ["tree", "tree_sampled"])
def test_reference_sampler_passes(name):
    evaluation, raw = run_tree(name)
    assert evaluation.verdict.verdict == "PASS", [
        (t.test, t.status) for t in evaluation.tests if t.status != "PASS"
    ]
    counts = raw.csv("raw/tree/counts.csv")
    assert set(counts["source"]) == {"edge", "grid" if name == "tree" else "sampled"}


@pytest.mark.parametrize("mutant", TREE_MUTANTS)
def test_every_tree_mutant_fails_the_grid_protocol(mutant):
    evaluation, _ = run_tree("tree", mutant=mutant)
    assert evaluation.verdict.verdict == "FAIL"


def test_sampled_protocol_kills_a_planted_bug():
    """Negative control of the sampled protocol (the kill matrix measures all of them)."""
    evaluation, _ = run_tree("tree_sampled", mutant="tree_final_node_coin")
    assert evaluation.verdict.verdict == "FAIL"
    failed = {t.test for t in evaluation.tests if t.status == "FAIL"}
    assert any(t.endswith("_pos0") or "_pos" in t for t in failed)


def test_mixed_batches_are_what_the_runner_sends():
    """Rows of differently shaped trees share kernel calls: a kernel that assumed one
    shape per call would be exercised (the runner interleaves the cases)."""
    from specconform.runner.tree import _random_rows

    trees = [tree_of(c) for c in _cases("tree_sampled")]
    rows, coins, final = _random_rows(trees, 10, 0, 0)
    assert set(rows[: len(trees)]) == set(range(len(trees)))
    assert coins.shape == (10 * len(trees), max(t.nodes for t in trees))


def test_bad_tree_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "protocols" / "tree.yaml").read_text()
    bad.write_text(text.replace("parents: [-1, 0, 1, 1]", "parents: [-1, 2, 1, 1]", 1))
    proc = run_cli("run", bad, "--out", tmp_path / "out", "--no-sign")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "parent" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_chain_mutant_is_refused_by_the_tree_sampler(tmp_path):
    proc = run_cli("run", ROOT / "protocols" / "tree.yaml", "--mutant", "shared_uniform",
                   "--out", tmp_path, "--no-sign")  # fmt: skip
    assert proc.returncode == 2 and "tree mutants" in proc.stderr


def test_a_tree_mutant_is_refused_by_other_kinds_before_any_work(tmp_path):
    proc = run_cli("run", ROOT / "protocols" / "quadrature.yaml", "--mutant", "tree_coin_le",
                   "--out", tmp_path / "out", "--no-sign")  # fmt: skip
    assert proc.returncode == 2 and "applies to tree protocols only" in proc.stderr
    assert not (tmp_path / "out").exists()
