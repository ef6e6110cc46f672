"""The quadrature kind's failure reason names the failing check (issue 33): a zero-mass
commit reads "zero-mass commit", not "bound exceeded", in archives of raw format 2;
earlier archives keep their wording so `verify` still recomputes them (the committed
peers_vllm_kernel archive failed on zero-mass commits with "bound exceeded")."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specconform.adapters.kernel import load_kernel
from specconform.kinds.quadrature.evaluate import REASONS_FORMAT, evaluate_case
from specconform.protocol.load import load_protocol
from specconform.runner.quadrature import collect
from specconform.util.progress import silent
from specconform.verification.verify import verify_archive

ROOT = Path(__file__).resolve().parents[2]
VLLM_KERNEL = ROOT / "docs/evidence/peers/peers_vllm_kernel-348d0db7-9fc99d0b.zip"


@pytest.fixture(scope="module")
def case_and_raw():
    loaded = load_protocol(ROOT / "protocols/quadrature.yaml")
    data = loaded.model.model_dump(mode="json")
    data["cases"] = [dict(c, grid=8) for c in data["cases"] if c["name"] == "disjoint_supports"]
    model = type(loaded.model).model_validate(data)
    files = collect(model, load_kernel("bundled", "cpu", None), silent)
    raw = json.loads(files["raw/quadrature/disjoint_supports.json"])
    return data["cases"][0], raw


def test_new_raw_files_carry_the_format_and_pass(case_and_raw):
    case, raw = case_and_raw
    assert raw["format"] == REASONS_FORMAT
    row = evaluate_case(case, raw)
    assert row.passed and row.reason == ""


def test_zero_mass_commit_has_its_own_reason(case_and_raw):
    case, raw = case_and_raw
    bad = copy.deepcopy(raw)
    bad["edge_committed"][0] = [5]  # token 5 has no target mass in disjoint_supports
    row = evaluate_case(case, bad)
    assert not row.passed
    assert row.detail.max_abs_error_first <= row.detail.bound_first  # the law is in bound
    assert row.reason == "zero-mass commit"
    legacy = {k: v for k, v in bad.items() if k != "format"}
    assert evaluate_case(case, legacy).reason == "bound exceeded"  # as archives stated it


def test_bound_exceeded_still_reads_so(case_and_raw):
    case, raw = case_and_raw
    bad = copy.deepcopy(raw)
    x = next(iter(bad["first_counts"]))
    counts = bad["first_counts"][x]
    # move every grid point of one draft onto token 0 (positive mass): law out of bound
    bad["first_counts"][x] = {"0": sum(counts.values())}
    row = evaluate_case(case, bad)
    assert not row.passed and row.reason == "bound exceeded"
    bad["edge_committed"][0] = [5]
    assert evaluate_case(case, bad).reason == "zero-mass commit; bound exceeded"


def test_committed_archive_with_the_old_wording_still_verifies():
    report = verify_archive(VLLM_KERNEL, ROOT / "docs/evidence/peers/peers.pub")
    assert report is not None
