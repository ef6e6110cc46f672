"""JUnit XML for CI systems: one testcase per test row.

Only deciding rows (``TestRow.deciding``) can be a <failure>: a failed deciding test
(adjusted p below the family-wise alpha, a broken deterministic rule, or no evidence,
message the row's reason: "no evidence", or e.g. "not applicable: <why>"). Rows that do not decide never fail CI: they are <skipped> with
their own outcome in the message (a chance failure of a secondary test must not turn CI
red while the verdict passes). Every testcase's <system-out> states role, status,
statistic, df, p-value (and the adjusted one), n and alpha. No timestamps or durations
(time="0"): the same rows give the same XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from specconform.report.model import format_number, format_pvalue, outcome, pvalue_text
from specconform.results import NO_EVIDENCE, TestRow


def junit_xml(tests: Sequence[TestRow], suite_name: str) -> str:
    """A <testsuites> document with one <testsuite name=suite_name>."""
    failures = sum(1 for t in tests if _fails(t))
    skipped = sum(1 for t in tests if not t.deciding)
    counts = {
        "tests": str(len(tests)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": "0",
    }
    root = ET.Element("testsuites", {"name": "specconform", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": suite_name, **counts})
    for row in tests:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"{suite_name}.{row.role}", "name": row.test, "time": "0"},
        )
        summary = (
            f"role={row.role} status={row.status} "
            f"statistic={format_number(row.statistic)} df={format_number(row.df)} "
            f"{pvalue_text(row)} n={row.n} alpha={row.alpha:g}"
        )
        if _fails(row):
            failure = ET.SubElement(
                case,
                "failure",
                {
                    "message": _failure_message(row),
                    "type": "NoEvidence" if row.status == NO_EVIDENCE else "StatisticalRejection",
                },
            )
            failure.text = summary
        elif not row.deciding:
            ET.SubElement(
                case, "skipped", {"message": f"{row.role}: {outcome(row)}, reported, never decides"}
            )
        ET.SubElement(case, "system-out").text = summary
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _fails(row: TestRow) -> bool:
    return row.deciding and row.passed is not True


def _failure_message(row: TestRow) -> str:
    if row.status == NO_EVIDENCE:
        return row.reason or "no evidence"  # e.g. "not applicable: <why>"
    if row.adjusted_pvalue is not None:
        return f"{pvalue_text(row)} below alpha={row.alpha:g}"
    if row.pvalue is not None:
        return f"p={format_pvalue(row.pvalue)} below alpha={row.alpha:g}"
    return row.reason or "rule broken"
