"""Property-based tests of the command line as hostile input (issue 37, part 4).

Property: any argv for any subcommand (run, gate, plan, verify, report, replay, keygen,
mutants, schema, and whatever is registered later: the commands and their options are
read from click) -- with hostile values (huge, negative and non-finite numbers, unicode
and control characters, 10,000-character paths, missing files, directories, /dev/zero,
unknown options) -- ends with one of the documented exit codes (specconform.util.errors'
EXIT_*), never a traceback and never more than CLI_SECONDS; when it is an error, the
last stderr line is its one ``error: ...`` line and the only one.

Run in process (`specconform.cli._main`, the entry point less its fast exit), in a
scratch working directory, so a default --out or a key written by keygen lands there.
Inputs that name system paths are only ever read: the protocol or archive argument is
always hostile, so no run reaches the engine, and keygen gets relative prefixes only.

Profiles: bounded and derandomized in CI (CI_EXAMPLES["argv"] examples, well under 60 s
on one idle core), ``SPECCONFORM_HYPOTHESIS=long`` (``make test-hostile-long``) for the
long random one (tests/toolkit/hostile_support.py).

Negative controls: the same property over a CLI whose archive reader is made to raise a
raw exception, print two error lines or hang must fail.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specconform.cli import _main, cli
from specconform.util import errors
from tests.toolkit.hostile_support import CONTROL, Hang, profile, summary, time_limit

CLI_SECONDS = 20.0  # a refusal takes milliseconds; the first call imports (seconds)
DOCUMENTED = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
LONG_NAME = "a" * 10_000

# Values every option and argument may get. Paths outside the scratch folder are read
# (refused), never written: no command below writes before its input is accepted.
HOSTILE = [
    "", " ", "-", "--", "-1", "0", "1", "5e3", "2e6", "1.5", str(2**70), "9" * 400,
    "1e400", "-1e400", "nan", "NaN", "inf", "-inf", "0x10", "1_000", "25MB", "1KB",
    "-5MB", "é漢字", "x\u202ey", "new\nline", "tab\there", "\x1b[31m", "\udcff.yaml",
    LONG_NAME, "/nonexistent/deep/file.yaml", "/dev/zero", "/dev/null", "/", ".", "..",
    "cuda", "cpu", "md", "json", "greedy_draft", "HEAD~1", "--seeds", "-v",
]  # fmt: skip


def invoke(argv: list[str]) -> tuple[int | str, str, str]:
    """(exit code, stdout, stderr) of ``specconform *argv`` in this process; the exit
    code is a string naming the exception when one escaped the CLI."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["specconform", *argv]
    code: int | str
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else f"SystemExit({done.code!r})"
    except Hang:
        raise
    except BaseException as exc:  # noqa: BLE001 (the property reports it)
        code = f"raw {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        sys.argv = saved
    return code, out.getvalue(), err.getvalue()


def check_argv(argv: list[str]) -> str:
    """The property for one argv; returns 'ok' or 'error' for the summary."""
    shown = [a[:40] for a in argv]
    try:
        with time_limit(CLI_SECONDS):
            code, out, err = invoke(argv)
    except Hang:
        raise AssertionError(f"{shown} hung (> {CLI_SECONDS} s)") from None
    assert code in DOCUMENTED, f"{shown}: exit {code!r}; stderr {err[-500:]!r}"
    assert "Traceback" not in out + err, f"{shown}: a traceback: {err[-800:]!r}"
    if code in (errors.EXIT_PASS, errors.EXIT_FAIL):
        return "ok"
    lines = err.splitlines()
    flagged = [line for line in lines if line.startswith("error: ")]
    assert len(flagged) == 1 and lines[-1] == flagged[0], f"{shown}: stderr {err[-800:]!r}"
    return "error"


# --- argv strategies -------------------------------------------------------------------


def _value(scratch: Path):
    return st.one_of(
        st.sampled_from(HOSTILE),
        st.sampled_from([str(scratch), str(scratch / "bad.yaml"), str(scratch / "bytes.zip")]),
        st.integers(-(2**80), 2**80).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=40),
        # What a real argv can hold: any bytes but NUL, decoded as Python decodes argv
        # (undecodable bytes become lone surrogates \udc80-\udcff).
        st.binary(max_size=40).map(
            lambda b: b.replace(b"\x00", b"").decode("utf-8", "surrogateescape")
        ),
    )


def _argv(name: str, command: click.Command, scratch: Path):
    """argv for `command`: its positional arguments (always hostile inputs), a random
    subset of its options with hostile values, sometimes an unknown option."""
    value = _value(scratch)
    # keygen writes PREFIX.key: relative names only, inside the scratch folder.
    writable = st.text(st.characters(exclude_characters="\x00/"), min_size=1, max_size=30) | (
        st.just(LONG_NAME)
    )
    parts = []
    for param in command.params:
        if isinstance(param, click.Argument):
            parts.append(st.lists(value, min_size=1, max_size=2 if param.nargs == -1 else 1))
            continue
        flag = param.opts[0]
        if getattr(param, "is_flag", False):
            option = st.just([flag])
        else:
            option = (writable if name == "keygen" else value).map(lambda v, f=flag: [f, v])
        parts.append(st.one_of(st.just([]), option))
    parts.append(st.one_of(st.just([]), st.just([]), st.sampled_from([["--bogus"], ["-z"]])))
    return st.tuples(*parts).map(lambda groups: [name] + [a for g in groups for a in g])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli_hostile")
    (folder / "bad.yaml").write_text("kind: distribution\nname: [unclosed\n")
    (folder / "bytes.zip").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    return folder


@pytest.fixture()
def in_scratch(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(scratch / "config"))  # a user key, if made
    monkeypatch.setenv("CI", "true")
    return scratch


COMMANDS = sorted(cli.commands)


def test_every_command_is_generated():
    assert {"run", "gate", "plan", "verify", "report", "keygen", "mutants", "schema"} <= set(
        COMMANDS
    )


def test_generated_argv_ends_documented(in_scratch):
    outcomes: list[str] = []
    argv = st.sampled_from(COMMANDS).flatmap(lambda n: _argv(n, cli.commands[n], in_scratch))

    @profile("argv")
    @given(argv)
    def prop(args):
        outcomes.append(check_argv(args))

    prop()
    summary("cli argv", outcomes)
    assert "error" in outcomes  # the generator reaches refusals, not only --help-like ends


def test_hostile_options_on_a_valid_protocol_end_documented(in_scratch):
    """`run`/`gate` of a valid, tiny protocol (the fault adapter with no fault: 2 groups x
    20 seeds, seconds when it runs) with 1-3 of its options set to hostile values: a
    refusal, or a verdict when every value happens to be valid. --nproc is left out: it
    starts torchrun, a process of its own (test_sharding.py covers it)."""
    from tests.toolkit.test_fault_injection import _protocol

    protocol = str(_protocol(in_scratch, fault="raises", after=99))
    outcomes: list[str] = []

    def argv(name):
        options = [
            p for p in cli.commands[name].params
            if isinstance(p, click.Option) and p.name != "nproc"
        ]  # fmt: skip
        value = _value(in_scratch)
        one = st.sampled_from(options).flatmap(
            lambda p: st.just([p.opts[0]]) if p.is_flag else value.map(lambda v: [p.opts[0], v])
        )
        return st.lists(one, min_size=1, max_size=3).map(
            lambda chosen: [name, protocol] + [a for o in chosen for a in o]
        )

    @profile("valid_protocol")
    @given(st.sampled_from(["run", "gate"]).flatmap(argv))
    def prop(args):
        outcomes.append(check_argv(args))

    prop()
    summary("cli argv on a valid protocol", outcomes)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "/dev/zero"],
        ["run", LONG_NAME],
        ["gate", "/nonexistent/x.yaml", "--seeds", "9" * 400],
        ["plan", "/dev/zero", "--tv", "nan"],
        ["verify", LONG_NAME, "--skip-signature"],
        ["report", LONG_NAME],
        ["report", "/dev/zero", "--format", "json"],
        ["replay", "/dev/zero", "--test", "x"],
        ["keygen", "--out", LONG_NAME],
        ["schema", "--bogus"],
        ["run", "x.yaml", "--adapter-timeout", "nan"],
        ["run", "x.yaml", "--max-archive-size", "1e400KB"],
        ["replay", "\r", "--test", ""],  # a carriage return in the quoted path
        ["verify", "a\nb.zip", "--skip-signature"],
        ["run", "new\nline.yaml"],
    ],
)
def test_named_hostile_argv(in_scratch, argv):
    """Cases found by hand (issue 37): each one line, exit 2."""
    assert check_argv(argv) == "error"


# --- negative controls -------------------------------------------------------------------


def _broken_reader(how: str):
    def read(path):
        if how == "raises":  # a bug, not a path problem (OSError ends in one line)
            raise TypeError("raw")
        if how == "two_lines":
            print("error: first", file=sys.stderr)
            raise errors.UsageError("second")
        time.sleep(10**6)

    return read


@pytest.mark.parametrize("how", ["raises", "two_lines", "hangs"])
def test_negative_control_a_broken_cli_fails_the_property(in_scratch, monkeypatch, how):
    from specconform.evidence import reader

    monkeypatch.setattr(reader, "_read_archive", _broken_reader(how))
    monkeypatch.setattr(sys.modules[__name__], "CLI_SECONDS", 1.0)
    argv = st.just(["verify", str(in_scratch / "bytes.zip"), "--skip-signature"])

    @profile("control", max_examples=1, **CONTROL)
    @given(argv)
    def prop(args):
        check_argv(args)

    with pytest.raises(AssertionError):
        prop()
