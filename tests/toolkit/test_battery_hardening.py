"""Hardening from issue 15 and 13, at unit level (fast): dotted run names, portable
commands, keygen's folder, exit codes in --help, timing lines only when verbose, the
run lock, mutant and adapter names."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from specconform.cli import cli
from specconform.cli.evidence import keygen_command
from specconform.protocol.load import load_protocol
from specconform.runner.execute import free_destination, portable_command, zip_beside
from specconform.runner.preflight import check_adapter, check_mutant, check_run_folder
from specconform.runner.runlock import lock_holder, run_lock
from specconform.util import progress
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT


def _alarm(seconds: int):
    """Fail instead of hanging (the bug was an endless loop)."""

    def handler(signum, frame):
        raise TimeoutError("free_destination did not return")

    signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)


def test_dotted_run_names_are_never_truncated_and_numbering_terminates(tmp_path):
    run_id = "quadrature-0123abcd-89abcdef-ensemble_w0.95"
    assert zip_beside(tmp_path / run_id).name == f"{run_id}.zip"
    _alarm(5)
    try:
        assert free_destination(tmp_path, run_id) == tmp_path / run_id
        (tmp_path / run_id).mkdir()
        zip_beside(tmp_path / run_id).write_bytes(b"")
        assert free_destination(tmp_path, run_id) == tmp_path / f"{run_id}-2"
        (tmp_path / f"{run_id}-2").mkdir()
        zip_beside(tmp_path / f"{run_id}-2").write_bytes(b"")
        assert free_destination(tmp_path, run_id) == tmp_path / f"{run_id}-3"
    finally:
        signal.alarm(0)


def test_folders_left_by_the_truncating_versions_do_not_hang(tmp_path):
    # Earlier versions wrote OUT/<id>-ensemble_w0.95/ beside OUT/<id>-ensemble_w0.zip
    # (with_suffix ate ".95") and then looped forever looking for a free name.
    run_id = "quadrature-0123abcd-89abcdef-ensemble_w0.95"
    (tmp_path / run_id).mkdir()
    (tmp_path / "quadrature-0123abcd-89abcdef-ensemble_w0.zip").write_bytes(b"")
    _alarm(5)
    try:
        assert free_destination(tmp_path, run_id) == tmp_path / f"{run_id}-2"
    finally:
        signal.alarm(0)


def test_run_json_command_has_no_per_run_paths():
    argv = [
        "specconform",
        "run",
        "protocols/ci_gate.yaml",
        "--out",
        "/tmp/a",
        "--seeds",
        "5e3",
        "--ledger=/tmp/a/l.jsonl",
        "--key",
        "/k/x.key",
        "--resume",
        "/tmp/a/r",
    ]
    assert portable_command(argv) == [
        "specconform",
        "run",
        "protocols/ci_gate.yaml",
        "--out",
        "<out>",
        "--seeds",
        "5e3",
        "--ledger=<ledger>",
        "--key",
        "<key>",
        "--resume",
        "<resume>",
    ]


def test_keygen_creates_the_key_folder(tmp_path):
    prefix = tmp_path / "new" / "nested" / "ci"
    result = CliRunner().invoke(keygen_command, ["--out", str(prefix)])
    assert result.exit_code == 0, result.output
    assert (prefix.parent / "ci.key").is_file() and (prefix.parent / "ci.pub").is_file()
    assert (prefix.parent / "ci.key").stat().st_mode & 0o777 == 0o600


def test_help_lists_every_exit_code():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for code, meaning in (
        ("0", "passed"),
        ("1", "failed"),
        ("2", "bad input"),
        ("3", "evidence invalid"),
        ("130", "interrupted"),
    ):
        assert any(
            line.split()[:1] == [code] and meaning in line for line in result.output.splitlines()
        ), (code, result.output)


def test_timing_lines_only_when_verbose(capsys):
    from specconform.adapters.engine import _timing

    try:
        progress.set_verbose(False)
        _timing("engine built in 1.0s")
        progress.timing("reference replay in 2.0s")
        assert capsys.readouterr().err == ""
        progress.set_verbose(True)
        _timing("engine built in 1.0s")
        assert capsys.readouterr().err == "timing: engine built in 1.0s\n"
    finally:
        progress.set_verbose(False)


def _hold_lock(out: Path, run_id: str, ready, release) -> None:
    with run_lock(out, run_id):
        ready.set()
        release.wait(30)


def test_run_lock_tells_a_live_run_from_an_interrupted_one(tmp_path):
    out, run_id = tmp_path / "out", "p-01234567-89abcdef"
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(out, run_id, ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        assert lock_holder(out, run_id) == f"pid {holder.pid} on host {os.uname().nodename}"
        with pytest.raises(UsageError, match=f"is live \\(pid {holder.pid} on host"):
            check_run_folder(out, run_id, None)
        with pytest.raises(UsageError, match="is live"), run_lock(out, run_id):
            pass
    finally:
        release.set()
        holder.join(30)
    assert lock_holder(out, run_id) is None
    assert not out.exists()  # created by the lock, removed when left empty
    (out / f"{run_id}.inprogress").mkdir(parents=True)
    with pytest.raises(UsageError, match="interrupted run .* --resume"):
        check_run_folder(out, run_id, None)


def _kernel_protocol(tmp_path: Path, adapter: str):
    data = yaml.safe_load((ROOT / "protocols" / "quadrature.yaml").read_text())
    data["sampler"]["adapter"] = adapter
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_protocol(path)


def test_mutant_and_adapter_names_are_validated(tmp_path):
    user = _kernel_protocol(tmp_path, "my_sampler.adapters:factory")
    check_adapter(user)
    check_mutant(user, "ensemble_w0.95")  # a user factory defines its own mutants
    for bad in ("../x", "a/b", "", ".hidden", "x" * 65):
        with pytest.raises(UsageError, match="a name of letters"):
            check_mutant(user, bad)
    bundled = _kernel_protocol(tmp_path, "bundled")
    check_mutant(bundled, "residual_from_p")
    with pytest.raises(UsageError, match="engine mutant"):
        check_mutant(bundled, "greedy_draft")
    with pytest.raises(UsageError, match="unknown mutant"):
        check_mutant(bundled, "ensemble_w0.95")
    for bad in ("my sampler:factory", "os.system", "a:b:c", "../x:f"):
        with pytest.raises(UsageError, match="expected 'bundled'"):
            check_adapter(_kernel_protocol(tmp_path, bad))
