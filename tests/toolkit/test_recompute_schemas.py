"""`verify` across the two results schemas: the committed schema-1 archive
(docs/evidence/fp32_t2-*.zip, written before family-wise verdicts) still verifies through
the frozen schema-1 evaluator; schema-2 archives are compared on every new field; a
mismatch between the archive's schema and its protocol is named, not silently accepted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specconform.evidence import read_archive
from specconform.kinds import reevaluate
from specconform.util.errors import EvidenceError
from specconform.verification import verify_archive
from specconform.verification.recompute import check_recomputation, reevaluate_archive

ROOT = Path(__file__).resolve().parents[2]
(OLD,) = sorted((ROOT / "docs" / "evidence").glob("fp32_t2-*.zip"))


@pytest.fixture(scope="module")
def old():
    return read_archive(OLD)


@pytest.fixture(scope="module")
def old_recomputed(old):
    return reevaluate_archive(old)


def _with(contents, name, obj):
    files = dict(contents.files)
    files[name] = json.dumps(obj).encode()
    return replace(contents, files=files)


def test_committed_schema1_archive_verifies(old, old_recomputed):
    assert "verdict" not in old.json_object("protocol.json")
    assert old_recomputed.verdict.schema == 1
    check_recomputation(old, old_recomputed)  # raises at the first difference
    report = verify_archive(OLD)
    assert report.verdict == "PASS" and report.tests_recomputed == 21


def test_schema1_rows_are_still_compared_field_by_field(old, old_recomputed):
    rows = old.json("results/tests.json")
    rows[2] = {**rows[2], "pvalue": rows[2]["pvalue"] * 0.5}
    with pytest.raises(EvidenceError, match=f"test {rows[2]['test']} field pvalue"):
        check_recomputation(_with(old, "results/tests.json", rows), old_recomputed)


def test_schema_claimed_by_the_archive_must_match_its_protocol(old, old_recomputed):
    verdict = {**old.json_object("verdict.json"), "schema": 2}
    with pytest.raises(
        EvidenceError, match="results schema 2, but the protocol recomputes under schema 1"
    ):
        check_recomputation(_with(old, "verdict.json", verdict), old_recomputed)


def test_old_raw_data_under_the_current_rules(old):
    # The same raw data re-decided by today's rules (the protocol as it would be stated
    # now: Holm at 0.01 over its 4 deciding tests) also passes, and its engine_errors row
    # counts the recorded finish_reason of every request.
    protocol = {**old.json_object("protocol.json"), "verdict": {"combine": "holm", "alpha": 0.01}}
    ev = reevaluate(protocol, old.raw_data())
    assert ev.verdict.verdict == "PASS" and ev.verdict.schema == 3  # INCONCLUSIVE's schema
    assert ev.verdict.statement.startswith("false-fail rate ≤ 0.01 over 4 tests (Holm)")
    errors = next(r for r in ev.tests if r.test == "engine_errors")
    assert errors.status == "PASS" and errors.statistic == 0
