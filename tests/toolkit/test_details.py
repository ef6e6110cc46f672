"""Typed detail records (specconform/details): every record the evaluators build reads
back from its JSON as the same record, archives keep the objects written before the
records existed, and a detail that fits no record is bad input.

Every round trip starts from real evaluator output: the committed example archives
re-evaluated from their raw data, and the synthetic worlds the kinds' own tests use
(sequence, score, sequential, not-applicable, Monte Carlo). No detail is written by
hand. Deterministic: fixed seeds throughout, no statistical threshold is tested here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specconform.calibration import load_reference, make_world, simulate, world_from_reference
from specconform.calibration.sequence_synthetic import simulate as simulate_sequence
from specconform.details import TYPED_KINDS, JsonDetail, Record, legacy, parse_detail
from specconform.evidence.jsonio import compact_json
from specconform.evidence.reader import read_archive
from specconform.kinds import is_schema1, reevaluate
from specconform.kinds.distribution import evaluate_frames
from specconform.kinds.distribution.sequential import evaluate_sequential
from specconform.kinds.laws import montecarlo_laws
from specconform.kinds.sequence import evaluate_frames as sequence_frames
from specconform.protocol.load import load_protocol
from specconform.results import RawData, TestRow
from specconform.stats.reference import Reference
from specconform.stats.speculative import joint_cells
from tests.toolkit.cli_helpers import ROOT
from tests.toolkit.fixtures.sequence_run import PROTOCOL_PATH as SEQUENCE_PROTOCOL
from tests.toolkit.synthetic import PROTOCOL as DISTRIBUTION_PROTOCOL

EXAMPLES = sorted((ROOT / "docs/evidence").rglob("*.zip"))
SCHEMA1 = ROOT / "docs/evidence/fp32_t2-96c34d54-41ee4c6a.zip"
SEQUENTIAL_PROTOCOL = ROOT / "tests/toolkit/fixtures/sequential_protocol.yaml"


def _archived(path: Path) -> tuple[str, int, list[TestRow]]:
    """(kind, results schema, rows re-evaluated from the archive's raw data)."""
    contents = read_archive(path)
    protocol = contents.json_object("protocol.json")
    schema = 1 if protocol["kind"] == "distribution" and is_schema1(protocol) else 2
    return protocol["kind"], schema, list(reevaluate(protocol, contents.raw_data()).tests)


def _montecarlo_rows() -> list[TestRow]:
    # Counts at the exact expected cells of one case (the layering test's fixture).
    case = {
        "name": "c",
        "vocab": 4,
        "K": 1,
        "draft_lens": [1],
        "law_seed": 0,
        "p_support": 3,
        "q_support": 3,
        "concentration": 1.0,
    }
    p, q = montecarlo_laws(case)
    cells = np.round(joint_cells(p[0], q[0]) * 10000).astype(int)
    lines = ["case,position,cell,token,count"]
    lines += [
        f"c,0,{'accept' if i < 4 else 'reject'},{i % 4},{c}" for i, c in enumerate(cells) if c
    ]
    protocol = {
        "kind": "montecarlo",
        "name": "m",
        "alpha": 0.01,
        "min_expected": 5.0,
        "verdict": {"combine": "holm", "alpha": 0.01},
        "cases": [case],
    }
    raw = RawData({"raw/montecarlo_counts.csv": "\n".join(lines).encode()})
    return list(reevaluate(protocol, raw).tests)


def _distribution_rows() -> list[TestRow]:
    """Score rows (ci_gate at 300 seeds), not-applicable rows (no q) and the sequential
    e-process row, from the synthetic worlds of test_score / test_not_applicable /
    test_sequential_run."""
    gate = load_protocol(ROOT / "protocols/ci_gate.yaml").data
    world = world_from_reference(load_reference(ROOT / "bench/reference/ci_gate-tiny.json"))
    samples = simulate(world, 300, np.random.default_rng(21), groups=gate["groups"])
    rows = list(evaluate_frames(gate, samples, world.reference).tests)

    toy = make_world(0)
    samples = simulate(toy, 300, np.random.default_rng(1), groups=DISTRIBUTION_PROTOCOL["groups"])
    no_q = copy.deepcopy(toy.reference)
    no_q["q_t2"], no_q["capabilities"] = {}, {"draft_law": False}
    rows += evaluate_frames(DISTRIBUTION_PROTOCOL, samples, no_q).tests

    sequential = load_protocol(SEQUENTIAL_PROTOCOL).data
    sequential["sequential"] = {"batch": 50}
    sequential["seeds"] = {**sequential["seeds"], "count": 100}  # run to the budget
    samples = simulate(toy, 100, np.random.default_rng(5), groups=sequential["groups"])
    rows += evaluate_sequential(sequential, samples, Reference(toy.reference)).tests
    return rows


@pytest.fixture(scope="module")
def produced() -> list[tuple[str, int, TestRow]]:
    """(kind, schema, row) of every source above."""
    out = []
    for path in EXAMPLES:
        kind, schema, rows = _archived(path)
        out += [(kind, schema, r) for r in rows]
    for path in (SEQUENCE_PROTOCOL, ROOT / "protocols/ci_sequence.yaml"):  # + mechanism tests
        protocol = load_protocol(path).data
        evaluation = sequence_frames(protocol, *simulate_sequence(protocol, 1))
        out += [("sequence", 2, r) for r in evaluation.tests]
    out += [("montecarlo", 2, r) for r in _montecarlo_rows()]
    out += [("distribution", 2, r) for r in _distribution_rows()]
    # The tree kind: grid and sampled rows of the reference sampler, TV rows of the lossy
    # protocol (tests/toolkit/tree_helpers.py runs the kind's collector and evaluator).
    from tests.toolkit.tree_helpers import run_tree

    for name in ("tree", "tree_sampled", "tree_lossy"):
        out += [("tree", 3, r) for r in run_tree(name)[0].tests]
    return out


def _nested(record: Record) -> set[type]:
    """The record's type and those of every record inside it."""
    found = {type(record)}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        stack = [getattr(record, f.name)]
        while stack:
            value = stack.pop()
            if isinstance(value, Record):
                found |= _nested(value)
            elif isinstance(value, (tuple, list)):
                stack += list(value)
            elif isinstance(value, dict):
                stack += list(value.values())
    return found


def test_every_record_round_trips_through_its_json(produced):
    for kind, schema, row in produced:
        detail = row.detail
        assert isinstance(detail, Record), f"{kind} {row.test}: {type(detail).__name__}"
        text = json.dumps(detail.to_json())  # what the archive stores
        back = parse_detail(json.loads(text), kind, schema=schema)
        assert type(back) is type(detail), f"{kind} {row.test}"
        assert back == detail, f"{kind} {row.test}"
        assert compact_json(back.to_json()) == compact_json(detail.to_json())
        # The row itself, as results/tests.json and tests.csv hold it.
        again = TestRow.from_json(json.loads(json.dumps(row.to_json())), kind, schema=schema)
        assert again == row


def test_the_sources_cover_every_registered_record(produced):
    seen = set().union(*(_nested(r.detail) for _, _, r in produced))
    registered = {r for records in TYPED_KINDS.values() for r in records} | set(legacy.RECORDS)
    registered = {r for r in registered if not r.__module__.startswith("tests.")}
    assert registered - seen == set()


def test_old_archives_read_back_typed_and_unchanged():
    # Every committed example (one written before the family-wise verdict, schema 1)
    # reads back as typed records whose JSON is byte-for-byte the stated detail.
    for path in EXAMPLES:
        contents = read_archive(path)
        stated = contents.stated_rows()
        rows = contents.evaluation().tests
        assert len(rows) == len(stated)
        for row, raw in zip(rows, stated, strict=True):
            assert isinstance(row.detail, Record), f"{path.name} {row.test}"
            assert compact_json(row.detail.to_json()) == compact_json(raw["detail"])
    legacy_types = {type(r.detail) for r in read_archive(SCHEMA1).evaluation().tests}
    assert legacy_types & set(legacy.RECORDS) and not legacy_types & {JsonDetail}


def test_an_old_archive_still_verifies_and_reports(tmp_path):
    cli = [sys.executable, "-m", "specconform"]
    done = subprocess.run(
        [*cli, "verify", "--skip-signature", str(SCHEMA1)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "match the archive" in done.stdout
    out = tmp_path / "report.md"
    done = subprocess.run(
        [*cli, "report", str(SCHEMA1), "--details", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    # Read from the typed records: per-group tables (group), the coverage row's tests.
    assert "### Group `async`" in text
    assert "- primary, t2_async: 2 strata cover 4580/5000 samples (91.6%)" in text


def _with_detail(path: Path, tmp_path: Path, test: str, detail) -> Path:
    """A copy of the archive whose row `test` states `detail` (digests not redone: the
    reader parses rows before anything compares digests in `report`)."""
    import zipfile

    out = tmp_path / path.name
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("results/tests.json"):
                rows = json.loads(data)
                for row in rows:
                    if row["test"] == test:
                        row["detail"] = detail
                data = json.dumps(rows).encode()
            dst.writestr(info, data)
    return out


@pytest.mark.parametrize(
    "detail",
    [
        {"strata": "not a list"},  # fits no record's keys
        {"groups": ["a"], "per_group": [], "combination": 3},  # right keys, wrong type
    ],
)
def test_a_detail_that_fits_no_record_is_one_line_bad_input(tmp_path, detail):
    example = ROOT / "docs/evidence/pr-example/ci_gate-eba63360-29cc5a7d.zip"
    bad = _with_detail(example, tmp_path, "t1_speculative", detail)
    done = subprocess.run(
        [sys.executable, "-m", "specconform", "report", str(bad), "--out", str(tmp_path / "r.md")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 3, done.stderr  # EvidenceError: the archive is malformed
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "t1_speculative" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "r.md").exists()


def test_a_row_refuses_an_untyped_dict_detail():
    with pytest.raises(TypeError, match="not a detail record"):
        TestRow("t", "primary", None, None, None, 0, 0.01, None, {"group": "a"})  # type: ignore[arg-type]


def test_reading_is_strict_about_keys_and_values():
    from specconform.details.distribution import CoverageRecord

    ok = {"strata": 2, "n_covered": 10, "n_eligible": 20}
    assert CoverageRecord.from_json(ok) == CoverageRecord(strata=2, n_covered=10, n_eligible=20)
    assert "share" not in CoverageRecord.from_json(ok).to_json()  # absent stays absent
    for bad, what in (
        ({**ok, "extra": 1}, "unexpected key 'extra'"),
        ({"strata": 2, "n_covered": 10}, "missing key 'n_eligible'"),
        ({**ok, "strata": "2"}, "expected int"),
        ({**ok, "strata": True}, "expected int"),
    ):
        with pytest.raises(ValueError, match=what):
            CoverageRecord.from_json(bad)
    # An int stays an int (the archive's bytes: 3, not 3.0).
    assert CoverageRecord.from_json({**ok, "share": 1}).to_json()["share"] == 1
