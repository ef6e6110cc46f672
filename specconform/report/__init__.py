"""Reports from evidence archives: pull-request Markdown, HTML with plots, JUnit XML and
the CI step summary. Imports no torch and no engine; reads archives without verifying
them (`specconform verify` does that)."""

from specconform.report.html import html_report
from specconform.report.junit import junit_for_archive, junit_xml
from specconform.report.markdown import markdown_report
from specconform.report.summary import (
    append_step_summary,
    evaluation_summary_markdown,
    step_summary_markdown,
)

__all__ = [
    "append_step_summary",
    "evaluation_summary_markdown",
    "html_report",
    "junit_for_archive",
    "junit_xml",
    "markdown_report",
    "step_summary_markdown",
]
