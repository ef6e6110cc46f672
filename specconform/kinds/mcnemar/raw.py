"""The raw files of a McNemar run and their consistency checks (torch-free).

``raw/gsm8k.json`` (written by specconform.runner.mcnemar)::

    {"dataset": {"distribution", "version", "relpath", "sha256", "salt", "questions"},
     "stop": [str, ...],                       # the stop sequences that cut generations
     "docs": [{"doc_id", "question", "answer", "target", "prompt_hash", "rank_key"}, ...],
     "trials": [{"doc": int (index into docs), "replicate": int, "seed": int}, ...],
     "groups": [str, ...]}

``raw/samples/<group>.jsonl``: one line per (trial, filter) in lm-evaluation-harness's
samples layout: ``doc_id``, ``doc`` (id, question, answer), ``target``, ``arguments``
(the prompt's sha256 and the generation parameters), ``resps`` ([[the raw
generation]]), ``filtered_resps`` ([the extracted answer]), ``filter``
("strict-match" | "flexible-extract"), ``metrics`` (["exact_match"]), ``exact_match``
(0 | 1), ``doc_hash`` / ``prompt_hash`` / ``target_hash`` (sha256 of the JSON document
with sorted keys, of the prompt text, of the target), plus ``trial``, ``seed``,
``finish_reason`` and ``tokens`` (number of generated tokens).

The evaluator rescores every generation from ``resps`` with specconform's reimplementation
of the gsm8k_cot filters and refuses an archive whose recorded answers or scores differ.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from specconform.kinds.mcnemar.scoring import METRICS, Score, score, target_of
from specconform.results import RawData

RAW_FILE = "raw/gsm8k.json"


def samples_file(group: str) -> str:
    return f"raw/samples/{group}.jsonl"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def doc_hash(doc: dict) -> str:
    return sha256_text(json.dumps(doc, sort_keys=True, ensure_ascii=False))


@dataclass(frozen=True)
class GroupSamples:
    """One group's trials, rescored; index = trial."""

    group: str
    scores: tuple[Score, ...]
    finish_reasons: tuple[str, ...]

    def correct(self, metric: str) -> list[int]:
        return [s.by_metric(metric) for s in self.scores]

    @property
    def errors(self) -> int:
        return sum(r == "error" for r in self.finish_reasons)


def sample_lines(
    trial: int, seed: int, doc: dict, prompt_hash: str, generation: str, stop, extra: dict
) -> list[dict]:
    """The two lm-eval-style sample records (one per filter) of one trial."""
    target = target_of(doc["answer"])
    s = score(generation, target, stop)
    answers = {"strict-match": s.strict_answer, "flexible-extract": s.flexible_answer}
    marks = {"strict-match": s.strict, "flexible-extract": s.flexible}
    return [
        {
            "doc_id": doc["id"],
            "doc": doc,
            "target": target,
            "arguments": {"prompt_hash": prompt_hash, "until": list(stop), **extra["gen"]},
            "resps": [[generation]],
            "filtered_resps": [answers[metric]],
            "filter": metric,
            "metrics": ["exact_match"],
            "exact_match": marks[metric],
            "doc_hash": doc_hash(doc),
            "prompt_hash": prompt_hash,
            "target_hash": sha256_text(target),
            "trial": trial,
            "seed": seed,
            "finish_reason": extra["finish_reason"],
            "tokens": extra["tokens"],
        }
        for metric in METRICS
    ]


def load(raw: RawData, protocol: dict) -> tuple[dict, dict[str, GroupSamples]]:
    """The run's index and every group's rescored samples; ValueError on raw data that
    does not fit the protocol or whose recorded scores differ from the rescoring."""
    data = raw.json(RAW_FILE)
    n_docs, n_seeds = protocol["dataset"]["questions"], protocol["seeds"]["count"]
    if len(data["docs"]) != n_docs:
        raise ValueError(f"{RAW_FILE}: {len(data['docs'])} questions, protocol has {n_docs}")
    if len(data["trials"]) != n_docs * n_seeds:
        raise ValueError(
            f"{RAW_FILE}: {len(data['trials'])} trials, protocol has {n_docs} x {n_seeds}"
        )
    stop = tuple(data["stop"])
    declared = protocol["dataset"].get("stop")
    if declared is not None and list(stop) != list(declared):
        raise ValueError(f"{RAW_FILE}: stop sequences {list(stop)} differ from the protocol's")
    groups = {}
    for g in (g["name"] for g in protocol["groups"]):
        lines = [json.loads(x) for x in raw.bytes(samples_file(g)).splitlines() if x.strip()]
        groups[g] = _rescore(g, lines, data, stop)
    return data, groups


def _rescore(group: str, lines: list[dict], data: dict, stop: tuple[str, ...]) -> GroupSamples:
    by_trial: dict[int, dict[str, dict]] = {}
    for line in lines:
        by_trial.setdefault(int(line["trial"]), {})[line["filter"]] = line
    n = len(data["trials"])
    if sorted(by_trial) != list(range(n)) or any(set(v) != set(METRICS) for v in by_trial.values()):
        raise ValueError(f"{samples_file(group)}: not one line per trial and filter ({n} trials)")
    scores, reasons = [], []
    for t in range(n):
        doc = data["docs"][data["trials"][t]["doc"]]
        target = target_of(doc["answer"])
        first = by_trial[t][METRICS[0]]
        generation = first["resps"][0][0]
        s = score(generation, target, stop)
        for metric, answer in (
            ("strict-match", s.strict_answer),
            ("flexible-extract", s.flexible_answer),
        ):
            line = by_trial[t][metric]
            if line["resps"][0][0] != generation:
                raise ValueError(f"{samples_file(group)}: trial {t} has two different generations")
            if line["filtered_resps"] != [answer] or int(line["exact_match"]) != s.by_metric(
                metric
            ):
                raise ValueError(
                    f"{samples_file(group)}: trial {t} {metric}: recorded "
                    f"{line['filtered_resps']!r}/{line['exact_match']} but rescoring gives "
                    f"{answer!r}/{s.by_metric(metric)}"
                )
            if line["target"] != target or line["target_hash"] != sha256_text(target):
                raise ValueError(f"{samples_file(group)}: trial {t}: target differs from the doc")
        scores.append(s)
        reasons.append(str(first.get("finish_reason", "")))
    return GroupSamples(group, tuple(scores), tuple(reasons))
