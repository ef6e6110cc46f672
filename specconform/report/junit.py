"""JUnit XML for CI systems: one testcase per test row.

A failed row (passed False) carries a <failure>; a row that never decides (passed None,
exploratory) is <skipped> so CI shows it without counting it; every testcase's
<system-out> states role, statistic, df, p-value, n and alpha. No timestamps or
durations (time="0"): the same rows give the same XML.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from specconform.report.model import format_number, format_pvalue
from specconform.results import TestRow


def junit_xml(tests: Sequence[TestRow], suite_name: str) -> str:
    """A <testsuites> document with one <testsuite name=suite_name>."""
    failures = sum(1 for t in tests if t.passed is False)
    skipped = sum(1 for t in tests if t.passed is None)
    counts = {"tests": str(len(tests)), "failures": str(failures), "errors": "0",
              "skipped": str(skipped), "time": "0"}
    root = ET.Element("testsuites", {"name": "specconform", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": suite_name, **counts})
    for row in tests:
        case = ET.SubElement(suite, "testcase", {"classname": f"{suite_name}.{row.role}",
                                                "name": row.test, "time": "0"})
        summary = (f"role={row.role} statistic={format_number(row.statistic)} "
                   f"df={format_number(row.df)} pvalue={format_pvalue(row.pvalue)} "
                   f"n={row.n} alpha={row.alpha:g}")
        if row.passed is False:
            failure = ET.SubElement(case, "failure", {
                "message": f"p={format_pvalue(row.pvalue)} below alpha={row.alpha:g}",
                "type": "StatisticalRejection"})
            failure.text = summary
        elif row.passed is None:
            ET.SubElement(case, "skipped", {"message": f"{row.role}: reported, never decides"})
        ET.SubElement(case, "system-out").text = summary
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
