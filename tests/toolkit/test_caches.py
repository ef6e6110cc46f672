"""The persistent caches (specconform/runner/caches.py): Triton's kernels and the engine's
weights go under ``<out>/.cache`` unless the user set a folder, and nothing is created
up front."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from specconform.runner.caches import use_persistent_caches
from tests.toolkit.cli_helpers import ROOT


def test_triton_cache_defaults_under_the_out_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv("ENGINE_UNDER_TEST_WEIGHT_CACHE", raising=False)
    use_persistent_caches(tmp_path / "reports")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path.resolve() / "reports/.cache/triton")
    assert not (tmp_path / "reports").exists()  # Triton creates it when it compiles


def test_a_cache_the_user_chose_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/else")
    use_persistent_caches(tmp_path)
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/else"


def test_weight_cache_defaults_under_the_out_folder(tmp_path, monkeypatch):
    from specconform.runner.caches import WEIGHT_CACHE_ENV

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv(WEIGHT_CACHE_ENV, raising=False)
    use_persistent_caches(tmp_path / "reports")
    assert os.environ[WEIGHT_CACHE_ENV] == str(tmp_path.resolve() / "reports/.cache/weights")
    assert not (tmp_path / "reports").exists()
    monkeypatch.setenv(WEIGHT_CACHE_ENV, "/mine")
    use_persistent_caches(tmp_path)
    assert os.environ[WEIGHT_CACHE_ENV] == "/mine"


def _fail_inside(out):
    from specconform.runner.caches import persistent_caches

    with pytest.raises(RuntimeError), persistent_caches(out):
        (out / ".cache" / "weights").mkdir(parents=True)
        (out / ".cache" / "weights" / "entry.pt").write_bytes(b"x")
        raise RuntimeError("the run stopped")


def test_a_failed_run_takes_the_caches_it_created(tmp_path):
    from specconform.runner.caches import persistent_caches

    out = tmp_path / "reports"
    _fail_inside(out)
    assert not out.exists()  # created by the run, empty again: removed
    with persistent_caches(out):  # a run that finishes keeps what it cached
        (out / ".cache").mkdir(parents=True)
    assert (out / ".cache").is_dir()
    (out / ".cache" / "triton").mkdir()
    _fail_inside(out)  # existed before this run: kept, with what it holds
    assert (out / ".cache" / "triton").is_dir()


def test_bad_input_leaves_no_weight_cache_behind(tmp_path):
    """The bundled engine caches its weights under <out>/.cache (it loads before the
    prompts can be checked against its vocabulary); a run that then stops on bad input
    (exit 2, one line) leaves the out folder as it found it: absent. Control: the same
    run with a cache folder of the user's keeps its entry, so the engine did write one."""
    from tests.toolkit.test_sequence_run import SMALL, _write

    data = json.loads(json.dumps(SMALL))
    data["prompts"][1] = [7, 600]
    protocol = _write(tmp_path, data)
    env = {k: v for k, v in os.environ.items() if k != "ENGINE_UNDER_TEST_WEIGHT_CACHE"}

    def run(out, **extra):
        args = ["run", str(protocol), "--out", str(out), "--no-sign"]
        return subprocess.run(
            [sys.executable, "-m", "specconform", *args],
            capture_output=True,
            text=True,
            env={**env, "CI": "true", **extra},
            cwd=ROOT,
            timeout=120,
        )

    done = run(tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert "token 600 outside the engine's vocabulary" in done.stderr
    assert not (tmp_path / "out").exists()
    mine = tmp_path / "mine"
    done = run(tmp_path / "out2", ENGINE_UNDER_TEST_WEIGHT_CACHE=str(mine))
    assert done.returncode == 2, done.stderr
    assert len(list(mine.glob("*.pt"))) == 1 and not (tmp_path / "out2").exists()


# A module imported after use_persistent_caches, in a fresh interpreter, with the
# installation probe pointed at a package of the test's own (argv[3]): where the
# module's bytecode went (the prefix, and whether a __pycache__ appeared beside it).
BYTECODE_PROBE = """
import sys
from pathlib import Path
from specconform.runner import caches
out, src = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(src))
caches.BYTECODE_PROBES = (sys.argv[3],)
caches.use_persistent_caches(out)
import probe_module
print(sys.pycache_prefix)
print(sorted(str(p.relative_to(out)) for p in out.rglob("*.pyc")))
print((src / "__pycache__" / f"probe_module.{sys.implementation.cache_tag}.pyc").exists())
"""


def _bytecode_probe(tmp_path, probe="bare_package", **env_changes):
    """Run BYTECODE_PROBE with `bare_package` (no bytecode) and `compiled_package`
    (compiled beside its source) installed under tmp_path/src."""
    import py_compile

    src = tmp_path / "src"
    for package in ("bare_package", "compiled_package"):
        (src / package).mkdir(parents=True)
        (src / package / "__init__.py").write_text("")
    py_compile.compile(str(src / "compiled_package" / "__init__.py"))
    (src / "probe_module.py").write_text("VALUE = 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", BYTECODE_PROBE, str(tmp_path / "out"), str(src), probe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    prefix, pycs, beside = done.stdout.strip().splitlines()
    return prefix, ast.literal_eval(pycs), beside == "True"


def test_bytecode_goes_under_the_out_folder_when_the_install_has_none(tmp_path):
    """PYTHONDONTWRITEBYTECODE=1 and a torch without bytecode (the lab's GPU image):
    every process compiled torch from source. Now the bytecode goes to
    <out>/.cache/pycache, and nothing is written beside the sources."""
    prefix, pycs, beside = _bytecode_probe(tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert prefix == str((tmp_path / "out").resolve() / ".cache" / "pycache")
    assert any(p.startswith(".cache/pycache/") and "probe_module" in p for p in pycs), pycs
    assert not beside


def test_an_install_with_bytecode_and_the_users_choices_are_left_alone(tmp_path):
    # pip compiled the installation: a prefix would hide its bytecode. Nothing changes
    # (and, writing being off, nothing is written anywhere).
    prefix, pycs, beside = _bytecode_probe(
        tmp_path / "a", probe="compiled_package", PYTHONDONTWRITEBYTECODE="1"
    )
    assert prefix == "None" and pycs == [] and not beside
    # A normal interpreter writes beside the sources, as always.
    prefix, pycs, beside = _bytecode_probe(tmp_path / "b")
    assert prefix == "None" and pycs == [] and beside
    # A prefix the user chose wins.
    mine = tmp_path / "mine"
    prefix, pycs, _ = _bytecode_probe(
        tmp_path / "c", PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(mine)
    )
    assert prefix == str(mine) and pycs == []
