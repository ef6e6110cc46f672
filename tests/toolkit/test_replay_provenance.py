"""Provenance of the engine a run drove (issue 36, part 5): run.json
``engine_adapter.engine`` names the engine's package, version and git commit (when it is
loaded from a checkout) beside specconform's own (environment.json).

A user's engine is simulated by a package written to a temporary folder: in a git
checkout (commit recorded, dirty after an edit) and outside one (commit None: the
negative control that the commit is read from the package's checkout, not from the
working directory's).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from specconform.adapters.provenance import engine_package

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git")


def _package(root, name: str, version: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(
        f'__version__ = "{version}"\n\nclass Adapter:\n    pass\n'
    )


def _git(root, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def on_path(monkeypatch):
    def add(path):
        monkeypatch.syspath_prepend(str(path))

    yield add
    for name in ("h36_engine_git", "h36_engine_plain"):
        sys.modules.pop(name, None)


def test_engine_in_a_checkout_records_its_commit(tmp_path, on_path):
    repo = tmp_path / "repo"
    _package(repo, "h36_engine_git", "1.2.3")
    _git(repo, "init", "-q")
    _git(repo, "add", "h36_engine_git/__init__.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "engine")
    on_path(repo)
    import h36_engine_git

    info = engine_package(h36_engine_git.Adapter(), {})
    assert (info.package, info.version) == ("h36_engine_git", "1.2.3")
    assert info.commit == _git(repo, "rev-parse", "HEAD") and info.dirty is False
    (repo / "h36_engine_git" / "__init__.py").write_text('__version__ = "1.2.4"\n')
    assert engine_package(h36_engine_git.Adapter(), {}).dirty is True


def test_engine_outside_a_checkout_has_no_commit(tmp_path, on_path):
    _package(tmp_path / "site", "h36_engine_plain", "0.9")
    on_path(tmp_path / "site")
    import h36_engine_plain

    info = engine_package(h36_engine_plain.Adapter(), {})
    assert (info.package, info.version, info.commit, info.dirty) == (
        "h36_engine_plain",
        "0.9",
        None,
        None,
    )


def test_an_adapter_names_the_engine_it_drives():
    class Wrapper:  # defined here (package tests): the adapter names engine_under_test
        pass

    info = engine_package(Wrapper(), {"engine_package": "engine_under_test"})
    assert info.package == "engine_under_test" and info.version
    assert engine_package(Wrapper(), {}).package == "tests"


def test_the_runner_records_q_of_out_of_support_t3_tokens():
    """runner.replay.offender_draft_laws: q at the group's draft depth of every observed
    t3 of reference probability 0, and of nothing else (a correct engine's reference gets
    no q_t3_offenders key); the diagnosis then states it beside p = 0."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    from specconform.runner.replay import offender_draft_laws

    calls = []

    class Engine:
        prompt = [9]

        def draft_laws(self, prefixes, depth):
            calls.append((prefixes, depth))
            return [np.array([0.1, 0.2, 0.3, 0.4]) for _ in prefixes]

    model = SimpleNamespace(
        groups=[
            SimpleNamespace(name="async", draft_loops=2),
            SimpleNamespace(name="nospec", draft_loops=None),
        ]
    )
    ref = {"p_t3": {"1,2": {"0": 0.5, "1": 0.5}}}
    samples = pd.DataFrame(
        {
            "group": ["async", "async", "nospec", "async"],
            "t1": [1, 1, 1, 1],
            "t2": [2, 2, 2, 2],
            "t3": [3, 0, 3, 7],  # 3 and 7 out of support (7 outside the vocabulary)
        }
    )
    offender_draft_laws(Engine(), model, samples, ref, [2])
    assert ref["q_t3_offenders"] == {"2": {"1,2": {"3": 0.4, "7": 0.0}}}
    assert calls == [([[9, 1, 2]], 2)]  # one prefix, the async group's depth only
    clean = {"p_t3": {"1,2": {"0": 0.5, "1": 0.5}}}
    offender_draft_laws(Engine(), model, samples[samples["t3"] < 2], clean, [2])
    assert "q_t3_offenders" not in clean  # negative control: nothing out of support
