"""The Python API: lazy names, the typed results, the verify rule, and every code block
of docs/api.md run as written (from the repository root, blocks in order)."""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import specconform

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "evidence" / "fp32_t2-96c34d54-41ee4c6a.zip"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def test_import_is_lazy_and_names_are_public():
    code = (
        "import sys, specconform; heavy = [m for m in ('numpy', 'scipy', 'torch', "
        "'pandas', 'specconform.api') if m in sys.modules]; print(heavy); "
        "print(sorted(set(dir(specconform)) - {'__version__'})[:3])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.splitlines()[0] == "[]"
    for name in (
        "run",
        "verify",
        "load_archive",
        "pearson_gof",
        "pearson_homogeneity",
        "rate_test",
        "detectable_tv",
        "UsageError",
        "EvidenceError",
        "Run",
    ):
        assert name in dir(specconform) and getattr(specconform, name) is not None
    with pytest.raises(AttributeError):
        specconform.no_such_name  # noqa: B018


def test_every_api_name_is_public_at_the_top_and_resolves():
    # Every name of specconform.api must be public at the top, resolved from the API
    # (a name added to the API but not to the lazy table would be unreachable as
    # specconform.<name>), and every public name must resolve to the defining module's.
    import specconform.api

    from_api = {name for name, module in specconform._LAZY.items() if module == "specconform.api"}
    assert set(specconform.api.__all__) == from_api
    assert from_api <= set(specconform.__all__)
    for name in specconform.__all__:
        if name != "__version__":
            module = importlib.import_module(specconform._LAZY[name])
            assert getattr(specconform, name) is getattr(module, name), name


def test_public_statistics_have_scipy_style_docstrings():
    # The public functions of specconform.api.stats, read from the package's export table
    # (_LAZY) rather than a copy of its list: eight today, the result classes aside.
    names = [
        name
        for name, module in specconform._LAZY.items()
        if module == "specconform.api.stats" and inspect.isfunction(getattr(specconform, name))
    ]
    assert len(names) == 8 and {"pearson_gof", "bonferroni", "detectable_tv"} <= set(names)
    for name in names:
        doc = getattr(specconform, name).__doc__
        assert "Parameters\n    ----------" in doc and "Returns\n    -------" in doc, name


def test_public_statistics_equal_the_protocols_statistics():
    from specconform.stats import pearson_gof

    assert specconform.pearson_gof([10, 30, 60], [0.2, 0.3, 0.5]) == pearson_gof(
        [10, 30, 60], [0.2, 0.3, 0.5]
    )


def test_verify_refuses_without_a_key_unless_told_to_skip(tmp_path):
    with pytest.raises(specconform.UsageError, match="skip_signature=True"):
        specconform.verify(ARCHIVE)
    with pytest.raises(specconform.UsageError, match="contradict"):
        specconform.verify(ARCHIVE, tmp_path / "k.pub", skip_signature=True)
    report = specconform.verify(ARCHIVE, skip_signature=True)
    assert report.signature == "unsigned" and not report.trusted and report.verdict == "PASS"


def test_verify_rejects_a_tampered_archive(tmp_path):
    from tests.toolkit.fixtures.evidence_toy import rewrite_zip

    top = "fp32_t2-96c34d54-41ee4c6a"
    bad = rewrite_zip(
        ARCHIVE, tmp_path / "bad.zip", replace={f"{top}/verdict.json": b'{"verdict": "FAIL"}\n'}
    )
    with pytest.raises(specconform.EvidenceError):
        specconform.verify(bad, skip_signature=True)


def test_load_archive_gives_typed_rows():
    view = specconform.load_archive(ARCHIVE)
    assert view.run_id == "fp32_t2-96c34d54-41ee4c6a"
    row = view.row("t2_async")
    assert isinstance(row, specconform.TestRow) and row.role == "primary" and row.n > 0
    with pytest.raises(specconform.UsageError, match="not found"):
        specconform.load_archive(ARCHIVE.with_name("missing.zip"))


def test_run_rejects_bad_input_before_running(tmp_path):
    with pytest.raises(specconform.UsageError, match="device"):
        specconform.run(ROOT / "protocols" / "quadrature.yaml", device="tpu", out=tmp_path)
    with pytest.raises(specconform.UsageError, match="cannot read"):
        specconform.run(tmp_path / "missing.yaml", sign=False, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_docs_api_md_runs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    blocks = _blocks((ROOT / "docs" / "api.md").read_text())
    assert len(blocks) >= 5
    namespace: dict = {"__name__": "docs_api"}
    ran = 0
    for block in blocks:
        if block.startswith("# needs: engine") and not HAS_TORCH:
            continue
        exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102
        ran += 1
    out = capsys.readouterr().out
    assert "refused:" in out and "detectable TV:" in out
    assert ran == len(blocks) or not HAS_TORCH
    if HAS_TORCH:
        assert "FAIL ('partial_overlap',)" in out and "does not sample exactly" in out


def test_docstring_examples_run():
    import doctest

    import specconform.api.stats as api_stats

    result = doctest.testmod(api_stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0
    import specconform.api as api

    result = doctest.testmod(api, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0  # plan_protocol's example
