"""JUnit XML as CI systems read it (issue 36): valid against the Jenkins/GitLab JUnit
schema, stable classnames, passing non-deciding rows passed (with a property saying they
do not decide), real times, and each failure's diagnosis in its message and text.

Archives: the shipped ci_gate protocol on exact synthetic laws, seeds fixed (fixtures/
distribution_run.py): clean, and with one planted out-of-support token (fixtures/
failing_run.py). The schema is tests/data/junit/jenkins-junit-10.xsd (its header names
the upstream file it restates); an upstream copy dropped in as junit-10.xsd is used too.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specconform.evidence import read_archive
from specconform.report.junit import junit_for_archive
from tests.toolkit.fixtures import distribution_run as real
from tests.toolkit.fixtures.failing_run import out_of_support_archive

xmlschema = pytest.importorskip("xmlschema", reason="pip install xmlschema (the dev extra)")

DATA = Path(__file__).resolve().parents[1] / "data" / "junit"
SCHEMAS = [p for p in (DATA / "jenkins-junit-10.xsd", DATA / "junit-10.xsd") if p.is_file()]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    base = tmp_path_factory.mktemp("junit")
    failing, planted = out_of_support_archive(base / "f", "ci_gate-00000000-20250101T000000")
    return {
        "failing": failing,
        "planted": planted,
        "clean": real.build_archive(base / "c", "ci_gate-00000000-20250303T000000"),
        "clean2": real.build_archive(base / "d", "ci_gate-11111111-20250404T000000", rng_seed=3),
    }


def _suite(xml: str):
    (suite,) = ET.fromstring(xml).findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    return suite, cases, props


@pytest.mark.parametrize("which", ["failing", "clean"])
def test_output_validates_against_the_jenkins_schema(archives, which):
    xml = junit_for_archive(archives[which])
    assert SCHEMAS
    for path in SCHEMAS:
        xmlschema.XMLSchema(str(path)).validate(xml)


@pytest.mark.parametrize(
    "breakage",
    [
        ("<testcase classname", "<testcase><properties /></testcase><testcase classname"),
        ('tests="19"', 'tests_="19"'),  # a required attribute missing
        ('time="60.000"', 'time="60s"'),  # not Surefire's time pattern
    ],
)
def test_schema_rejects_what_ci_would_not_read(archives, breakage):
    """Negative control: the schema check can fail."""
    xml = junit_for_archive(archives["clean"])
    broken = xml.replace(*breakage, 1)
    assert broken != xml
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        xmlschema.XMLSchema(str(SCHEMAS[0])).validate(broken)


def test_classnames_are_stable_across_runs(archives):
    a = _suite(junit_for_archive(archives["clean"]))
    b = _suite(junit_for_archive(archives["clean2"]))
    names = {n: c.get("classname") for n, c in a[1].items()}
    assert names == {n: c.get("classname") for n, c in b[1].items()}
    assert names["t2_async"] == "specconform.ci_gate.primary"
    assert not any("2025" in c or "0000" in c for c in names.values())  # no run id
    assert a[2]["run_id"] == "ci_gate-00000000-20250303T000000"  # it is a property
    assert a[0].get("name") == b[0].get("name") == "ci_gate"


def test_non_deciding_rows_pass_with_a_property_and_real_times(archives):
    suite, cases, props = _suite(junit_for_archive(archives["clean"]))
    rows = read_archive(archives["clean"]).evaluation().tests
    for row in rows:
        case = cases[row.test]
        assert props[f"decides.{row.test}"] == ("true" if row.deciding else "false")
        if not row.deciding and row.status in ("PASS", "INFO"):
            assert [child.tag for child in case] == ["system-out"]  # passed, not skipped
            assert "does not decide" in case.find("system-out").text
    # Only non-deciding rows that did not pass are skipped (their outcome in the message).
    not_passed = [r.test for r in rows if not r.deciding and r.status not in ("PASS", "INFO")]
    assert suite.get("skipped") == str(len(not_passed))
    assert all(cases[n].find("skipped") is not None for n in not_passed)
    # volatile.json of the fixture: started 00:00:00, finished 00:01:00.
    assert suite.get("time") == "60.000"
    assert suite.get("timestamp") == "2025-01-01T00:00:00Z"


def test_failure_carries_the_diagnosis(archives):
    planted = archives["planted"]
    suite, cases, props = _suite(junit_for_archive(archives["failing"]))
    failure = cases["out_of_support"].find("failure")
    assert failure is not None and failure.get("type") == "RuleBroken"
    where = f"seed {planted.seed} position 2 token {planted.token}"
    assert where in failure.get("message") and "\n" not in failure.get("message")
    assert where in failure.text and "reproduce one: specconform replay" in failure.text
    assert suite.get("failures") == "1"
    # A passing deciding test carries no failure and no diagnosis.
    assert cases["t2_async"].find("failure") is None
