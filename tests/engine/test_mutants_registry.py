"""The planted-bug registry: names, layers, descriptions, lookups."""

from __future__ import annotations

import dataclasses

import pytest

from engine_under_test.mutants import MUTANTS, Mutant, get_mutant, list_mutants
from engine_under_test.sampling import KERNEL_MUTANTS
from specconform.adapters.tree_reference import TREE_MUTANTS
from tests.engine.helpers import deep_mutant_names, scope_mutant_names

# Written out by hand on purpose (bench/kill_matrix_engine.py's default list repeats the
# engine names): a registry test that read its names from the registry would check nothing.
KERNEL = {"residual_from_p", "bonus_off_by_one", "shared_uniform"}
ENGINE = {
    "greedy_draft",
    "target_default_params",
    "draft_raw_q",
    "residual_inplace",
    "no_draft_probs",
    "bonus_params",
    "bf16_q",
    "shared_rng",
    "async_stale_input",
    "nan_target_once",
}
# Engine mutants that act only past the first draft position (runners/deep_mutants.py),
# and those that act only in a configuration, at a stop or in a stream (scope_mutants.py).
DEEP = set(deep_mutant_names()) | set(scope_mutant_names())
# Planted in specconform's reference tree sampler (issue 34), not in the engine: the
# registry must list exactly the bugs the sampler plants (its own list, read by name).
TREE = set(TREE_MUTANTS)


def test_registry_holds_exactly_the_planned_mutants():
    assert {m.name for m in list_mutants("kernel")} == KERNEL
    assert {m.name for m in list_mutants("engine")} == ENGINE | DEEP
    assert {m.name for m in list_mutants("tree")} == TREE
    assert {m.name for m in list_mutants()} == KERNEL | ENGINE | DEEP | TREE == set(MUTANTS)
    assert not any(MUTANTS[name].fault for name in DEEP)  # biases, not faults
    assert all(MUTANTS[name].name == name for name in MUTANTS)


def test_kernel_mutants_are_the_ones_speculative_accept_implements():
    assert set(KERNEL_MUTANTS) == KERNEL


def test_every_mutant_is_described_in_one_line_with_its_bug_class():
    for m in list_mutants():
        assert m.layer in ("kernel", "engine", "tree")
        for text in (m.description, m.bug_class):
            assert text and text.strip() == text and "\n" not in text
    assert get_mutant("greedy_draft").bug_class == "greedy draft scored with softmax q"
    assert get_mutant("bf16_q").bug_class == "bf16 q against fp32 p"


def test_get_mutant_and_errors():
    assert get_mutant("shared_uniform") is MUTANTS["shared_uniform"]
    with pytest.raises(
        ValueError, match="unknown mutant 'nope'.*async_stale_input.*shared_uniform"
    ):
        get_mutant("nope")
    with pytest.raises(ValueError, match="unknown mutant"):
        get_mutant(None)
    with pytest.raises(ValueError, match="layer must be None or one of"):
        list_mutants("sampler")
    with pytest.raises(ValueError, match="layer must be one of"):
        Mutant("x", "model", "d", "b")


def test_mutants_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_mutant("bf16_q").layer = "kernel"
