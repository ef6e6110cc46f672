"""The pytest plugin and specconform.testing's assertions, with negative controls.

Statistical tests here use fixed seeds, so each outcome is deterministic. Error rates:
assert_law runs at alpha = 0.01 (a correct sampler fails 1% of seeds; the seeds below are
fixed, not chosen after looking); the wrong law (TV 0.05 from p) is detected at n = 5,000
with power > 0.99 (detectable TV at power 0.8 is 0.026). assert_sampler_exact's Monte
Carlo part runs at family-wise alpha = 0.01; residual_from_p moves the joint cells by far
more than the detectable TV (~0.02) and fails the deterministic quadrature part too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specconform.testing import assert_law, assert_sampler_exact

pytest_plugins = ["pytester"]

P = np.array([0.5, 0.3, 0.2])
WRONG = np.array([0.45, 0.35, 0.2])  # TV 0.05 from P


def test_assert_law_passes_on_the_right_law_and_records_numbers():
    rng = np.random.Generator(np.random.PCG64(7))
    record = assert_law(rng.choice(3, size=5000, p=P), P, alpha=0.01, seeds="PCG64(7)")
    assert record.passed and record.n == 5000 and record.df == 2
    assert 0.01 <= record.pvalue <= 1 and 0.02 < record.detectable_tv < 0.03


def test_assert_law_fails_on_a_wrong_law_with_every_number_in_the_message():
    rng = np.random.Generator(np.random.PCG64(7))
    with pytest.raises(AssertionError) as info:
        assert_law(rng.choice(3, size=5000, p=WRONG), P, alpha=0.01, seeds="PCG64(7)")
    message = str(info.value)
    for field in ("statistic=", "df=2", "p=", "n=5000", "seeds=PCG64(7)", "detectable_tv="):
        assert field in message, message


def test_assert_law_refuses_an_underpowered_sample_and_out_of_support_draws():
    rng = np.random.Generator(np.random.PCG64(8))
    with pytest.raises(AssertionError, match="underpowered.*need about n >="):
        assert_law(rng.choice(3, size=100, p=P), P, detectable_tv=0.02)
    with pytest.raises(AssertionError, match="out of support"):
        assert_law(np.array([0, 1, 2, 3] * 50), P)
    with pytest.raises(AssertionError, match="out of support"):
        assert_law(np.array([0, 1, 2] * 50), [0.5, 0.5, 0.0])


def test_detectable_tv_matches_the_noncentral_chi2_closed_form():
    from scipy import stats

    from specconform import detectable_tv

    # df = 1: power 0.8 at alpha 0.01 needs lambda = (z_{0.995} + z_{0.8})^2.
    lam = (stats.norm.isf(0.005) + stats.norm.isf(0.2)) ** 2
    assert detectable_tv(10_000, 1, 0.01) == pytest.approx((lam / 40_000) ** 0.5, rel=1e-3)
    assert detectable_tv(40_000, 1, 0.01) == pytest.approx(detectable_tv(10_000, 1, 0.01) / 2)
    assert detectable_tv(0, 3, 0.01) == float("inf")


def test_assert_sampler_exact_passes_the_bundled_kernel_and_kills_residual_from_p():
    pytest.importorskip("torch")
    from specconform.adapters.kernel import BundledKernel

    records = assert_sampler_exact(BundledKernel("cpu").accept, alpha=0.01)
    assert {r.name.split(":")[0] for r in records} == {"quadrature", "montecarlo"}
    with pytest.raises(AssertionError) as info:
        assert_sampler_exact(BundledKernel("cpu", "residual_from_p").accept, alpha=0.01)
    message = str(info.value)
    assert "quadrature:partial_overlap: FAIL" in message
    assert "montecarlo:single_draft_pos0_joint: FAIL" in message and "df=" in message
    assert "seeds=PCG64((0, case index))" in message and "detectable_tv=0.0" in message


def test_assert_sampler_exact_checks_what_the_function_returns():
    def broken(p, q, drafts, draft_lens, uniforms):
        return np.zeros((len(drafts), 1)), np.zeros(len(drafts)), np.zeros(len(drafts))

    with pytest.raises(ValueError, match="accept returned tokens"):
        assert_sampler_exact(broken, methods=("quadrature",))


FRESH_PROJECT_TEST = """
import numpy as np
from specconform.testing import assert_law

P = [0.5, 0.3, 0.2]

def test_right_law(specconform_rng, specconform_records):
    assert_law(specconform_rng.choice(3, size=4000, p=P), P, seeds="node id")
    assert len(specconform_records) == 1

def test_wrong_law():
    rng = np.random.Generator(np.random.PCG64(3))
    assert_law(rng.choice(3, size=4000, p=[0.4, 0.4, 0.2]), P, seeds="PCG64(3)")

def test_rng_is_deterministic(specconform_rng):
    assert specconform_rng.integers(1 << 30) == {first}
"""


@pytest.mark.parametrize("xdist", [(), ("-p", "xdist", "-n", "2")], ids=["serial", "xdist"])
def test_plugin_in_a_fresh_project(pytester, monkeypatch, xdist):
    # Only the entry point's name, with autoloading off: what `pytest -p specconform`
    # gives a project that installed specconform and nothing else. Under pytest-xdist the
    # checks are made in worker processes and must still reach the summary and archive.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    import hashlib

    nodeid = "test_fresh.py::test_rng_is_deterministic"
    seed = int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:8], "little")
    first = int(np.random.Generator(np.random.PCG64(seed)).integers(1 << 30))
    pytester.makepyfile(test_fresh=FRESH_PROJECT_TEST.format(first=first))
    evidence = pytester.path / "evidence"
    result = pytester.runpytest_subprocess(
        "-p", "specconform", *xdist, "--specconform-archive", str(evidence)
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert_law: law rejected at alpha=0.01*",
            "*law: FAIL statistic=* df=2 p=* n=4000 alpha=0.01 seeds=PCG64(3) detectable_tv=*",
            "specconform: 2 checks in 2 tests: 1 PASS, 1 FAIL (1 in failing tests, 0 in passing tests); evidence in *evidence",
        ]
    )
    checks = json.loads((evidence / "specconform-checks.json").read_text())["checks"]
    assert sorted((c["nodeid"], c["passed"]) for c in checks) == [
        ("test_fresh.py::test_right_law", True),
        ("test_fresh.py::test_wrong_law", False),
    ]


NEGATIVE_CONTROL_TEST = """
import numpy as np
import pytest
from specconform.testing import assert_law

def test_wrong_law_is_rejected():
    rng = np.random.Generator(np.random.PCG64(3))
    with pytest.raises(AssertionError):
        assert_law(rng.choice(3, size=4000, p=[0.4, 0.4, 0.2]), [0.5, 0.3, 0.2], seeds="3")
"""


def test_summary_tells_negative_controls_from_failures(pytester, monkeypatch):
    # A FAIL inside a passing test is a negative control doing its job (TV 0.1 at
    # n = 4,000 is rejected at alpha 0.01 with power ~1 from the noncentral chi2, and the
    # seed is fixed): the line must not read like a broken suite.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_control=NEGATIVE_CONTROL_TEST)
    result = pytester.runpytest_subprocess("-p", "specconform")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "specconform: 1 checks in 1 tests: 0 PASS, 1 FAIL "
            "(0 in failing tests, 1 in passing tests: negative controls)"
        ]
    )


def test_plugin_is_silent_for_suites_that_do_not_use_it(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "specconform")
    result.assert_outcomes(passed=1)
    assert "specconform:" not in result.stdout.str()
