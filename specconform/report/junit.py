"""JUnit XML for CI systems: one testcase per test row.

Only deciding rows (``TestRow.deciding``) can be a <failure>: a failed deciding test
(adjusted p below the family-wise alpha, a broken deterministic rule, or no evidence,
message the row's reason). A deciding row without evidence (status NO_EVIDENCE: the
verdict is INCONCLUSIVE unless another test fails) is an <error type="Inconclusive">, not
a <failure>: nothing was shown wrong with the engine, the seeds were too few (message
"inconclusive: " and the row's reason, e.g. "no evidence" or "not applicable: <why>").
Rows that do not decide never fail CI: a passing (or informational) one is a passed
testcase, a failing one is <skipped> with its own outcome in the message (a chance
failure of a secondary test must not turn CI red while the verdict passes); either way
the suite's property ``decides.<test>`` says "false" (the Jenkins/GitLab schema has no
testcase properties). A failing row's text is its diagnosis (specconform.diagnosis:
where it differs). Every testcase's <system-out> states role, status, statistic, df,
p-value (and the adjusted one), n and alpha.

Stable across runs: the classname is ``specconform.<protocol>.<role>`` (no run id; the
run id is a suite property). Times come from the archive (volatile.json: the run's real
wall time on the suite, its start as ``timestamp``); the tests of a run are evaluated
together from its raw data, so a testcase has no time of its own and carries none. The
same archive gives the same XML. The output validates against the JUnit schema Jenkins'
xUnit plugin and GitLab read (tests/toolkit/test_junit_schema.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specconform.report.model import format_number, format_pvalue, outcome, pvalue_text
from specconform.results import INFO, NO_EVIDENCE, PASS, TestRow

if TYPE_CHECKING:
    from specconform.diagnosis import Diagnosis


def junit_for_archive(archive: Path) -> str:
    """The JUnit XML of an archive: suite named by the protocol (a mutant run's name says
    so), its run id, mutant and archive as properties, real times, and each failing
    test's diagnosis."""
    from specconform.diagnosis import diagnose_archive
    from specconform.evidence.reader import read_archive

    contents = read_archive(Path(archive))
    run = contents.json_object("run.json")
    volatile = contents.json_object("volatile.json") if "volatile.json" in contents.files else {}
    name = str(run.get("protocol_name") or contents.top)
    mutant = run.get("mutant")
    return junit_xml(
        list(contents.evaluation().tests),
        name,
        diagnoses=[_named(d, Path(archive).name) for d in diagnose_archive(contents)],
        time_s=_duration(volatile),
        timestamp=str(volatile.get("started_at") or "") or None,
        properties={
            "run_id": str(run.get("run_id", "")),
            "mutant": str(mutant or "none"),
            "archive": Path(archive).name,
        },
    )


def junit_xml(
    tests: Sequence[TestRow],
    suite_name: str,
    *,
    diagnoses: Sequence[Diagnosis] = (),
    time_s: float | None = None,
    timestamp: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> str:
    """A <testsuites> document with one <testsuite name=suite_name> (the protocol's name:
    classnames are ``specconform.<suite_name>.<role>``)."""
    diagnosed = {d.test: d for d in diagnoses}
    errors = sum(1 for t in tests if _fails(t) and t.status == NO_EVIDENCE)
    failures = sum(1 for t in tests if _fails(t)) - errors
    skipped = sum(1 for t in tests if _skipped(t))
    time = {} if time_s is None else {"time": f"{time_s:.3f}"}
    counts = {
        "tests": str(len(tests)),
        "failures": str(failures),
        "errors": str(errors),
    }
    root = ET.Element("testsuites", {"name": "specconform", **counts, **time})
    stamp = {} if not timestamp else {"timestamp": timestamp}
    suite = ET.SubElement(
        root, "testsuite", {"name": suite_name, **counts, "skipped": str(skipped), **time, **stamp}
    )
    props = ET.SubElement(suite, "properties")
    for key, value in {**(properties or {})}.items():
        ET.SubElement(props, "property", {"name": key, "value": value})
    for row in tests:
        decides = "true" if row.deciding else "false"
        ET.SubElement(props, "property", {"name": f"decides.{row.test}", "value": decides})
    for row in tests:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"specconform.{suite_name}.{row.role}", "name": row.test},
        )
        summary = (
            f"role={row.role} status={row.status} "
            f"statistic={format_number(row.statistic)} df={format_number(row.df)} "
            f"{pvalue_text(row)} n={row.n} alpha={row.alpha:g}"
        )
        if _fails(row):
            inconclusive = row.status == NO_EVIDENCE
            failure = ET.SubElement(
                case,
                "error" if inconclusive else "failure",
                {
                    "message": _failure_message(row),
                    "type": "Inconclusive" if inconclusive else _failure_type(row),
                },
            )
            diagnosis = diagnosed.get(row.test)
            failure.text = "\n".join([*(diagnosis.lines() if diagnosis else []), summary])
            if diagnosis is not None:
                failure.set("message", _failure_message(row) + _first_detail(diagnosis))
        elif _skipped(row):
            ET.SubElement(
                case, "skipped", {"message": f"{row.role}: {outcome(row)}, reported, never decides"}
            )
        if not row.deciding:
            summary += f" (does not decide: a {row.role} row is reported, never fails CI)"
        ET.SubElement(case, "system-out").text = summary
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _fails(row: TestRow) -> bool:
    return row.deciding and row.passed is not True


def _duration(volatile: Mapping) -> float | None:
    """The run's wall time in seconds: volatile.json's ``duration_s``, else finished_at -
    started_at; None when neither is there."""
    from datetime import datetime

    duration = volatile.get("duration_s")
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        return float(duration)
    try:
        start = datetime.fromisoformat(str(volatile["started_at"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(volatile["finished_at"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return max(0.0, (end - start).total_seconds())


def _named(diagnosis: Diagnosis, archive: str) -> Diagnosis:
    """The diagnosis with its replay hint naming the archive."""
    from dataclasses import replace

    return replace(diagnosis, archive=archive)


def _failure_type(row: TestRow) -> str:
    """A p-value below alpha, or a deterministic rule a correct engine never breaks."""
    return "StatisticalRejection" if row.pvalue is not None else "RuleBroken"


def _skipped(row: TestRow) -> bool:
    """A non-deciding row that did not pass: shown as skipped, never red. Passing and
    informational non-deciding rows are passed testcases."""
    return not row.deciding and row.status not in (PASS, INFO)


def _first_detail(diagnosis: Diagnosis) -> str:
    """The diagnosis line that says where (the first offender, divergence or stratum),
    for the one-line message CI lists show."""
    for line in diagnosis.lines()[1:]:
        text = line.strip()
        if text.startswith(("configuration:", "reproduce")) or text.endswith("first:"):
            continue
        return f"; {text}"
    return ""


def _failure_message(row: TestRow) -> str:
    if row.status == NO_EVIDENCE:
        return f"inconclusive: {row.reason or 'no evidence'}"  # e.g. "not applicable: <why>"
    if row.adjusted_pvalue is not None:
        return f"{pvalue_text(row)} below alpha={row.alpha:g}"
    if row.pvalue is not None:
        return f"p={format_pvalue(row.pvalue)} below alpha={row.alpha:g}"
    return row.reason or "rule broken"
