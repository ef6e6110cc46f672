"""Seed ledger: overlapping ranges of the same protocol are refused, naming the earlier
run; expansions declared by the protocol and mutant runs are allowed."""
import pytest

from specconform.errors import UsageError
from specconform.protocol.schema import Expansion
from specconform.runner.ledger import LedgerEntry, check_and_reserve, read_ledger


def entry(run, group="async", start=0, stop=5000, mutant=None, name="fp32_t2"):
    return LedgerEntry(name, "h" * 64, run, group, start, stop, mutant)


def test_disjoint_ranges_are_recorded(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    check_and_reserve(ledger, [entry("a", start=0, stop=5000)])
    check_and_reserve(ledger, [entry("b", start=5000, stop=10000)])
    assert [e.run_id for e in read_ledger(ledger)] == ["a", "b"]


def test_overlap_is_refused_naming_the_earlier_run(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    check_and_reserve(ledger, [entry("first-run", start=2_000_000, stop=2_005_000)])
    with pytest.raises(UsageError, match="earlier run first-run") as info:
        check_and_reserve(ledger, [entry("second", start=2_004_999, stop=2_010_000)])
    assert info.value.exit_code == 2
    assert len(read_ledger(ledger)) == 1  # nothing recorded for the refused run


def test_other_groups_protocols_and_mutant_runs_do_not_conflict(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    check_and_reserve(ledger, [entry("a")])
    check_and_reserve(ledger, [entry("b", group="nospec")])
    check_and_reserve(ledger, [entry("c", name="ci_gate")])
    check_and_reserve(ledger, [entry("d", mutant="greedy_draft")])
    assert len(read_ledger(ledger)) == 4


def test_declared_expansion_may_include_the_earlier_range(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    check_and_reserve(ledger, [entry("first", start=2_000_000, stop=2_005_000)])
    grow = Expansion(of_offset=2_000_000, of_count=5000)
    check_and_reserve(ledger, [entry("bigger", start=2_000_000, stop=2_020_000)],
                      expansion=grow)
    wrong = Expansion(of_offset=2_000_000, of_count=4000)
    with pytest.raises(UsageError):
        check_and_reserve(ledger, [entry("again", start=2_000_000, stop=2_030_000)],
                          expansion=wrong)


def test_resumed_run_does_not_conflict_with_itself(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    check_and_reserve(ledger, [entry("attempt-1")])
    check_and_reserve(ledger, [entry("attempt-1")])
    assert len(read_ledger(ledger)) == 1


def test_corrupt_ledger_is_a_clear_error(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("not json\n")
    with pytest.raises(UsageError, match="line 1"):
        read_ledger(ledger)
