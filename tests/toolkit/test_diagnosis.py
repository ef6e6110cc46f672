"""Diagnoses (specconform.diagnosis): where a failing row differs, from the archive alone.

Archives are the shipped ci_gate protocol on exact synthetic laws (fixtures/
distribution_run.py), seeds fixed, so every outcome below is deterministic:
- clean (rng_seed 1): every deciding test passes (the negative control: no diagnosis);
- one planted out-of-support t3 at a known (group, seed, position, token);
- the target built at temperature 0.8 (rng_seed 2; t2 noncentrality ~80 over ~40 df at
  2,000 seeds: Holm at alpha 0.01 rejects t2_async with power ~1, test_report.py).
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from specconform.details.distribution import StratifiedDetail
from specconform.diagnosis import diagnose, diagnose_archive
from specconform.diagnosis.cells import contribution
from specconform.diagnosis.decode import decoder_for
from specconform.evidence import read_archive
from specconform.kinds.equality.evaluate import evaluate as evaluate_equality
from specconform.report.terminal import print_table
from specconform.results import RawData
from tests.toolkit.fixtures.failing_run import known_archives, out_of_support_archive


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return known_archives(tmp_path_factory.mktemp("diagnosis"))


def test_clean_archive_has_no_diagnosis(archives):
    contents = read_archive(archives.clean)
    assert contents.evaluation().verdict.verdict == "PASS"
    assert diagnose_archive(contents) == ()


def test_out_of_support_names_the_planted_token(archives):
    path, planted = archives.failing, archives.planted
    contents = read_archive(path)
    row = next(r for r in contents.evaluation().tests if r.test == "out_of_support")
    assert row.status == "FAIL" and row.statistic == 1
    (d,) = [d for d in diagnose_archive(contents) if d.test == "out_of_support"]
    assert d.offender_count == 1 and len(d.offenders) == 1
    o = d.offenders[0]
    assert (o.group, o.seed, o.position, o.token, o.p) == (
        planted.group,
        planted.seed,
        planted.position,
        planted.token,
        0.0,
    )
    assert o.request == planted.seed  # seeds 0.. in order: the request index is the seed
    assert len(o.prefix) == 2 and o.q is None  # no q at t3 in reference.json: replay gives it
    text = d.text()
    assert f"seed {planted.seed} position 2 token {planted.token}" in text
    assert "specconform replay ARCHIVE --test out_of_support --case 0" in text
    assert "mode=async draft_loops=2" in text and "top_k=20" in text


def test_out_of_support_states_q_when_the_runner_recorded_it(tmp_path):
    path, planted = out_of_support_archive(tmp_path, "ci_gate-00000000-20250101T000000", q=0.125)
    (d,) = [d for d in diagnose_archive(read_archive(path)) if d.test == "out_of_support"]
    (o,) = d.offenders
    assert (o.token, o.p, o.q) == (planted.token, 0.0, 0.125)
    assert "p=0 q=0.125" in d.text()


def test_chi_square_failure_names_its_worst_stratum_and_cells(archives):
    contents = read_archive(archives.temperature)
    rows = {r.test: r for r in contents.evaluation().tests}
    assert rows["t2_async"].status == "FAIL" and rows["t2_async"].deciding
    diagnoses = {d.test: d for d in diagnose_archive(contents)}
    d = diagnoses["t2_async"]
    detail = rows["t2_async"].detail
    assert isinstance(detail, StratifiedDetail)
    worst = max(detail.strata, key=lambda s: s.statistic or 0.0)
    assert d.stratum is not None and d.stratum.where == f"t1={worst.t1}"
    assert "token index 1" in d.stratum.position
    cells = d.stratum.cells
    assert 1 <= len(cells) <= 5
    assert [c.contribution for c in cells] == sorted((c.contribution for c in cells), reverse=True)
    # Each cell's numbers are the record's own counts, its contribution recomputed.
    by_token = dict(
        zip(worst.tokens, zip(worst.observed, worst.expected, strict=True), strict=True)
    )
    for c in cells:
        o, e = by_token[int(c.label)]
        assert (c.observed, c.expected) == (o, e)
        assert c.contribution == pytest.approx(contribution(o, e)[0])
    assert max(abs(c.residual) for c in cells) > 3  # the temperature bug shows in one cell
    # Deciding rows come first; a failing secondary row is diagnosed too, after them.
    order = [diagnoses[t].test for t in diagnoses]
    assert order.index("t2_async") < order.index("t2_sync")
    # The clean archive's t2_async passed: not diagnosed (negative control above).


def test_joint_cells_keep_their_accept_reject_labels(archives):
    d = {d.test: d for d in diagnose_archive(read_archive(archives.temperature))}
    labels = [c.label for c in d["joint_async"].stratum.cells]
    assert labels and all(label.startswith(("acc:", "rej:")) for label in labels)
    acceptance = [c.label for c in d["acceptance_async"].stratum.cells]
    assert set(acceptance) <= {"accepted", "rejected"}


def test_terminal_prints_the_diagnosis_after_the_table(archives):
    path, planted = archives.failing, archives.planted
    buf = io.StringIO()
    print_table(read_archive(path).evaluation(), file=buf, archive=path)
    out = buf.getvalue()
    table_end = out.index("* deciding")
    where = out.index("where it differs:")
    assert where > table_end
    assert f"seed {planted.seed} position 2 token {planted.token}" in out[where:]
    assert f"specconform replay {path} --test out_of_support" in out
    clean = io.StringIO()
    print_table(read_archive(archives.clean).evaluation(), file=clean, archive=archives.clean)
    assert "where it differs" not in clean.getvalue()


def test_equality_divergence_shows_both_streams_from_the_first_difference():
    protocol = {
        "comparisons": [
            {"name": "sync_vs_async", "role": "primary", "base": "sync", "candidate": "async"}
        ],
        "configurations": [{"name": "sync"}, {"name": "async"}],
        "near_tie_gap": 0.01,
        "near_ties": "fail",
        "tests": [],
    }
    base = [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    cand = [[1, 2, 3, 4, 5, 6], [7, 8, 10, 11, 12]]
    raw = RawData(
        {
            "raw/outputs.json": json.dumps(
                {"prompts": [[0], [1]], "outputs": {"candidate": {"sync": base, "async": cand}}}
            ).encode()
        }
    )
    evaluation = evaluate_equality(protocol, raw)
    (d,) = diagnose(protocol, evaluation, raw)
    (div,) = d.divergences
    assert (div.case, div.position) == ("prompt 1", 2)
    assert div.engine == (10, 11, 12) and div.reference == (9,)
    # Negative control: identical streams fail nothing and get no diagnosis.
    same = RawData(
        {
            "raw/outputs.json": json.dumps(
                {"prompts": [[0], [1]], "outputs": {"candidate": {"sync": base, "async": base}}}
            ).encode()
        }
    )
    assert diagnose(protocol, evaluate_equality(protocol, same), same) == ()


def test_decoder_reads_a_checkpoint_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel

    tok = tokenizers.Tokenizer(WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))
    decode = decoder_for({"engine": {"checkpoint": str(tmp_path)}})
    assert decode(1) == "1 'world'" and decode("acc:1") == "acc:1"
    assert decoder_for({"engine": {"checkpoint": None}})(1) == "1"  # no tokenizer: bare ids


def test_diagnosis_lines_are_bounded_and_plain_text(archives):
    """At most a dozen lines (CI messages, the 20-line pytest cap) that rich prints as
    they are: token text with brackets must not be read as markup."""
    path = archives.failing
    (d,) = [d for d in diagnose_archive(read_archive(path)) if d.test == "out_of_support"]
    assert len(d.lines()) <= 12
    buf = io.StringIO()
    Console(file=buf, width=400).print(d.text(), markup=False)
    assert "after [" in buf.getvalue()


def test_verify_shows_the_diagnosis_offline(archives):
    from click.testing import CliRunner

    from specconform.cli.evidence import verify_command

    path, planted = archives.failing, archives.planted
    done = CliRunner().invoke(verify_command, [str(path), "--skip-signature"])
    assert done.exit_code == 0, done.output
    where = done.stdout.index("where it differs:")
    assert f"seed {planted.seed} position 2 token {planted.token}" in done.stdout[where:]
    clean = CliRunner().invoke(verify_command, [str(archives.clean), "--skip-signature"])
    assert clean.exit_code == 0 and "where it differs" not in clean.stdout


def test_a_deterministic_check_names_its_first_mismatch():
    from specconform.details.sequence import CheckDetail
    from specconform.results import Evaluation, TestRow, Verdict

    detail = CheckDetail(
        type="stops",
        applicable=True,
        why="",
        checked=40,
        mismatches=2,
        max_abs_diff=None,
        tolerance=None,
        examples=({"request": 3, "step": 5, "engine": 17, "reference": 2},),
        rule="committed tokens stop at the first stop token",
    )
    row = TestRow("stops_async", "primary", 2.0, None, None, 40, 0.01, False, detail, deciding=True)
    verdict = Verdict("FAIL", 0.01, "rule", ("stops_async",))
    (d,) = diagnose({}, Evaluation((row,), verdict), RawData({}))
    assert (
        '2 of 40 mismatched; first: {"engine": 17, "reference": 2, "request": 3, "step": 5}'
        in d.text()
    )
    passing = TestRow(
        "stops_async", "primary", 0.0, None, None, 40, 0.01, True, detail, deciding=True
    )
    assert (
        diagnose({}, Evaluation((passing,), Verdict("PASS", 0.01, "rule", ())), RawData({})) == ()
    )
